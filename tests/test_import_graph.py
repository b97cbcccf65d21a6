"""The module import graphs of jaxspec and of tf_bridge have no cycle, neither between
modules nor between subpackages (``jaxspec.loop`` -> ``jaxspec.hooks`` -> ``jaxspec.loop``
is a cycle even when no single module closes it; a module directly in the package counts
as a unit of its own).

Every import counts: module-level, inside a function (a lazy import that closes a
cycle is still a cycle) or under ``if TYPE_CHECKING:`` (a type-only import that closes a
cycle still ties the lower layer to the upper one: the contract names a ``Session``
Protocol instead of the loop's class). Edges are kept within one package: jaxspec's lazy imports of tf_bridge
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


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of the same package that ``name`` imports."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
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


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _unit(name: str) -> str:
    """``jaxspec.loop.train`` -> ``jaxspec.loop``; ``jaxspec.config.run_config`` stays itself. Below
    tf_bridge's runtime wing, one level deeper: ``tf_bridge.runtime.heads.base`` ->
    ``tf_bridge.runtime.heads`` (its subpackages are the rooms)."""
    parts = name.split(".")
    return ".".join(parts[: 3 if parts[:2] == ["tf_bridge", "runtime"] else 2])


def _unit_graph(package: str) -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for name, targets in _graph(package).items():
        edges = units.setdefault(_unit(name), set())
        edges.update(_unit(t) for t in targets if _unit(t) != _unit(name))
    return units


def _find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}  # state: 1 = on the DFS stack, 2 = done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
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


def _cycles(package: str) -> list[list[str]]:
    return _find_cycles(_graph(package))


@pytest.mark.parametrize("package", ["jaxspec", "tf_bridge"])
def test_no_import_cycle(package: str) -> None:
    cycles = _cycles(package)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["jaxspec", "tf_bridge"])
def test_no_cycle_between_subpackages(package: str) -> None:
    cycles = _find_cycles(_unit_graph(package))
    assert not cycles, "subpackage cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_layers_below_hooks_and_loop() -> None:
    """DESIGN's layer table: storage imports neither hooks nor loop; hooks do not import
    the loop or the facades."""
    units = _unit_graph("jaxspec")
    assert not units["jaxspec.store"] & {"jaxspec.hooks", "jaxspec.loop"}
    assert not units["jaxspec.hooks"] & {"jaxspec.loop", "jaxspec.estimators"}
    assert "jaxspec.store" in units["jaxspec.hooks"] and "jaxspec.hooks" in units["jaxspec.loop"]


def test_the_two_wings_of_tf_bridge() -> None:
    """DESIGN's bridge rows: the export wing imports neither the runtime wing nor the
    tf.estimator face; the runtime wing may import the export wing; jaxspec's (lazy)
    imports of tf_bridge reach the export wing only."""
    for name, targets in _graph("tf_bridge").items():
        if name.startswith("tf_bridge.export"):
            outside = {t for t in targets if not t.startswith("tf_bridge.export") and t != "tf_bridge._quiet"}
            assert not outside, f"{name} imports {sorted(outside)}"
    units = _unit_graph("tf_bridge")
    assert "tf_bridge.export" in units["tf_bridge.runtime.runner"]
    for name, path in _modules("jaxspec").items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tf_bridge"):
                assert (node.module or "").startswith("tf_bridge.export."), f"{name} imports {node.module}"


def test_the_walk_sees_real_edges() -> None:
    modules = _modules("tf_bridge")
    assert "tf_bridge.runtime.runner_hooks" in _imports(
        "tf_bridge.runtime.spec", modules["tf_bridge.runtime.spec"], modules
    )
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


def test_the_walk_sees_a_type_only_cycle(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import under ``if TYPE_CHECKING:`` that closes a cycle is a cycle."""
    pkg = tmp_path / "tyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tyc.high import Session\n"
    )
    (pkg / "high.py").write_text("from tyc.low import *\nclass Session: ...\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert _cycles("tyc") == [["tyc.high", "tyc.low", "tyc.high"]]


def test_the_contract_names_no_loop_class() -> None:
    """The hooks and the contract type their session as ``spec.hooks.Session``; the
    loop's HostSession satisfies it structurally."""
    from jaxspec.loop.hook_runner import HostSession
    from jaxspec.spec.hooks import Session

    assert isinstance(HostSession(), Session)
    for unit in ("jaxspec.spec", "jaxspec.hooks"):
        assert "jaxspec.loop" not in _unit_graph("jaxspec")[unit]


def test_the_walk_sees_a_subpackage_cycle(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two subpackages that import each other through different modules: no module
    cycle, one subpackage cycle."""
    for path, text in {
        "sub/__init__.py": "",
        "sub/p/__init__.py": "",
        "sub/p/x.py": "from sub.q.y import g\n",
        "sub/p/w.py": "",
        "sub/q/__init__.py": "",
        "sub/q/y.py": "def g():\n    return 1\n",
        "sub/q/z.py": "from sub.p import w\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert _cycles("sub") == []
    assert _find_cycles(_unit_graph("sub")) == [["sub.p", "sub.q", "sub.p"]]


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
