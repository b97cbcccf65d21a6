"""The module import graphs of jaxspec and of tf_bridge have no cycle.

Every import counts, module-level or inside a function (a lazy import that closes a
cycle is still a cycle); only imports under ``if TYPE_CHECKING:`` are skipped, since
they never run. Edges are kept within one package: jaxspec's lazy imports of tf_bridge
exist to keep TensorFlow out of ``import jaxspec`` and are checked separately.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, pathlib.Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of the same package that ``name`` imports."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]  # `import a.b.c.attr` -> the module a.b.c
            if target and target != name:
                found.add(target)
    return found


def _cycles(package: str) -> list[list[str]]:
    modules = _modules(package)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles, state = [], {}  # state: 1 = on the DFS stack, 2 = done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


@pytest.mark.parametrize("package", ["jaxspec", "tf_bridge"])
def test_no_import_cycle(package: str) -> None:
    cycles = _cycles(package)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_walk_sees_real_edges() -> None:
    modules = _modules("tf_bridge")
    assert "tf_bridge.runner_hooks" in _imports("tf_bridge.spec", modules["tf_bridge.spec"], modules)
    modules = _modules("jaxspec")
    lazy = _imports("jaxspec.metrics.adapters", modules["jaxspec.metrics.adapters"], modules)
    assert "jaxspec.metrics.base" in lazy


def test_the_walk_sees_a_cycle(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: a two-module cycle through a lazy import is found."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from cyc import a\n    return a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert _cycles("cyc") == [["cyc.a", "cyc.b", "cyc.a"]]


def test_jaxspec_lazy_imports_of_tf_bridge_are_explained() -> None:
    """jaxspec may import tf_bridge only lazily (TensorFlow stays out of `import
    jaxspec`), each such import under a one-line comment saying why."""
    for name, path in _modules("jaxspec").items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tf_bridge"):
                assert node.col_offset > 0, f"{name}: module-level import of {node.module}"
                above = lines[node.lineno - 2].strip()
                assert above.startswith("#") and "TensorFlow" in above, (
                    f"{name}:{node.lineno} lacks the comment"
                )
