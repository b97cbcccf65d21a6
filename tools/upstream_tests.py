"""Run tf.estimator's own unit tests, unmodified, against tf_bridge (and TF 2.15): a
measuring tool, not run in CI.

The test modules are read from the bare mirror of tensorflow/estimator
(``--mirror``, default /work/.mirror/tensorflow+estimator/repo, at ``--rev``), written to a
temporary directory and run there, one process per module, with unittest's loader (the
modules are ``tf.test.TestCase``s; TF 2.15's venv has no pytest, so both sides use the same
runner and count the same cases). Under tf_bridge the child process calls
``tf_bridge.install()`` first; upstream's test-support modules that tf_bridge does not
provide (``head/head_utils.py``, ``canned/*_testing_utils*.py``) are served from the
temporary directory under their upstream names, and ``util`` gets a stand-in holding only
the Keras handles the tests import. With ``--tf215`` the same modules run in
``/tmp/tf215venv`` against TensorFlow 2.15's own tf.estimator.

Usage (from the repository root)::

    python tools/upstream_tests.py heads estimator_test.py            # under tf_bridge
    python tools/upstream_tests.py --tf215 heads                      # TF 2.15 only
    python tools/upstream_tests.py --both --list heads                # side by side, + ids
    python tools/upstream_tests.py -k test_weight head/binary_class_head_test.py

A module is a path under ``tensorflow_estimator/python/estimator/`` or a group name
(``GROUPS``). Per module it prints passed / failed / errors / skipped, and ``import`` when
the module could not be imported (its cases cannot run); ``--list`` adds the ids of the
cases that did not pass, ``--json PATH`` writes every case's outcome; with ``--both`` it
counts the cases TF 2.15 passes and tf_bridge does not (or cannot run).

What is measured, and how it differs from a plain run:

- ``assertRaisesRegex`` and ``assertRaisesOpError`` check the exception type only
  (``--messages`` keeps the messages): tf_bridge's error messages are its own words, its
  exception types are TF's;
- a module whose upstream BUILD rule disables TF2 behaviour (``estimator_test.py``) runs
  after ``tf.compat.v1.disable_v2_behavior()``, on both sides;
- ``--standin-inputs`` serves upstream's ``inputs/`` (``numpy_io``, ``pandas_io``) under
  tf_bridge, for measuring before tf_bridge has its own;
- NumPy 2 (tf_bridge's venv) promotes ``float - np.float32`` to float32 where NumPy 1.26
  (TF 2.15's) gave float64, so an ``assertAlmostEqual(python_float, np.float32)`` can fail
  by one float32 step on identical values (``binary_class_head_test``'s
  ``test_float_labels_eval``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIRROR = "/work/.mirror/tensorflow+estimator/repo"
PKG = "tensorflow_estimator/python/estimator"
TF215_PYTHON = "/tmp/tf215venv/bin/python"
GROUPS = {
    "heads": [
        f"head/{m}_test.py"
        for m in ("base_head", "binary_class_head", "multi_class_head", "multi_head", "multi_label_head")
    ]
    + ["head/regression_head_test.py"],
    "canned": [
        "canned/linear_test.py",
        "canned/dnn_linear_combined_test.py",
        "canned/dnn_test_fc_v2.py",
        "canned/dnn_estimator_test.py",
        "canned/linear_estimator_test.py",
        "canned/dnn_linear_combined_estimator_test.py",
        "canned/baseline_test.py",
        "canned/baseline_estimator_test.py",
    ],
    "estimator": ["estimator_test.py"],
    # TF 2.15's v1 canned classes: every case is ``run_v1_only``, so these run with TF2
    # behaviour disabled (``V1_ONLY``) on both sides.
    "canned_v1": [
        f"canned/v1/{m}.py"
        for m in (
            "baseline_test_v1",
            "linear_test_v1",
            "dnn_test_fc_v2_v1",
            "dnn_linear_combined_test_v1",
            "baseline_estimator_test_v1",
            "linear_estimator_test_v1",
            "dnn_estimator_test_v1",
            "dnn_linear_combined_estimator_test_v1",
        )
    ],
}
# Upstream test-support modules, served under tf_bridge (TF 2.15 ships them in its package).
SUPPORT = [
    "head/head_utils.py",
    "canned/dnn_testing_utils.py",
    "canned/linear_testing_utils.py",
    "canned/v1/dnn_testing_utils_v1.py",
    "canned/v1/linear_testing_utils_v1.py",
]
# With --standin-inputs: upstream's input_fns, until tf_bridge has its own (served as support).
INPUTS = [
    "inputs/__init__.py",
    "inputs/numpy_io.py",
    "inputs/pandas_io.py",
    "inputs/queues/__init__.py",
    "inputs/queues/feeding_functions.py",
    "inputs/queues/feeding_queue_runner.py",
]
# Stand-ins for upstream modules the support modules import (Keras handles, a no-op export).
STANDINS = {
    "util.py": """\
import tf_keras
from tf_keras.api._v1 import keras as tf_keras_v1
from tf_keras.api._v2 import keras as tf_keras_v2
from tensorflow.python.util import function_utils
fn_args = function_utils.fn_args
""",
    "canned/v1/__init__.py": "",
    "estimator_export.py": "def estimator_export(*names, **kwargs):\n    return lambda obj: obj\n",
}


def _git_show(mirror: str, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", mirror, "show", f"{rev}:{PKG}/{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


# Modules whose cases are all ``test_util.run_v1_only``: under TF2 behaviour (how upstream's
# BUILD runs them) every case is skipped, so they are measured with it disabled.
V1_ONLY_PREFIX = "canned/v1/"


def tf1_modules(mirror: str, rev: str, modules: list[str]) -> set[str]:
    """The modules whose upstream ``py_test`` runs with TF2 behaviour disabled (their BUILD
    rule has the internal dependency that does it, marked by a placeholder comment), and
    the v1-only ones (``V1_ONLY_PREFIX``)."""
    build = _git_show(mirror, rev, "BUILD")
    out = {m for m in modules if m.startswith(V1_ONLY_PREFIX)}
    for block in re.findall(r"py_test\((.*?)\n\)", build, flags=re.S):
        srcs = re.search(r'srcs = \["([^"]+)"\]', block)
        if srcs and srcs.group(1) in modules and "disabling tf2 behavior" in block:
            out.add(srcs.group(1))
    return out


def extract(mirror: str, rev: str, modules: list[str], into: Path, inputs: bool) -> None:
    """Write ``modules`` and the support modules to ``into/tests`` and ``into/support``."""
    (into / "tests").mkdir(parents=True, exist_ok=True)
    for module in modules:
        (into / "tests" / Path(module).name).write_text(_git_show(mirror, rev, module))
    support = into / "support"
    texts = {m: _git_show(mirror, rev, m) for m in SUPPORT + (INPUTS if inputs else [])}
    texts.update({m: t for m, t in STANDINS.items() if m != "estimator_export.py" or inputs})
    for module, text in texts.items():
        target = support / module
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def expand(names: list[str]) -> list[str]:
    """Group names replaced by their modules, in order, without repeats."""
    out: list[str] = []
    for name in names:
        for module in GROUPS.get(name, [name]):
            if module not in out:
                out.append(module)
    return out


# ---- the child: runs in the process that imports TensorFlow ----------------------------


def _serve_support(support: Path) -> None:
    """A finder, first on sys.meta_path, for upstream's support modules (tf_bridge side)."""
    import importlib.abc
    import importlib.util

    prefix = PKG.replace("/", ".") + "."
    files = {}
    for file in support.rglob("*.py"):
        name = str(file.relative_to(support))[:-3].replace("/", ".")
        files[prefix + name.removesuffix(".__init__")] = file

    class SupportFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            file = files.get(fullname)
            if file is None:
                return None
            package = [str(file.parent)] if file.name == "__init__.py" else None
            return importlib.util.spec_from_file_location(fullname, file, submodule_search_locations=package)

    sys.meta_path.insert(0, SupportFinder())


def _case_id(case: Any) -> str:
    """A case's id; a subtest's is its test method's (TF's graph/eager modes are subtests)."""
    return getattr(case, "test_case", case).id()


def _outcomes(result: Any, run: list[str]) -> dict[str, str]:
    """One outcome per test method: the worst of its own and its subtests'."""
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    outcome = dict.fromkeys(run, "passed")

    def mark(case: Any, kind: str) -> None:
        key = _case_id(case)
        if rank[kind] > rank[outcome.get(key, "passed")]:
            outcome[key] = kind

    for kind, cases in (("failed", result.failures), ("error", result.errors), ("skipped", result.skipped)):
        for case, _ in cases:
            mark(case, kind)
    for case in getattr(result, "unexpectedSuccesses", []):
        mark(case, "failed")
    return outcome


def _types_only() -> None:
    """assertRaisesRegex(p) and assertRaisesOpError check the exception's type only:
    tf_bridge's messages are its own words, its types are TF's."""
    import unittest

    def raises_type(self: Any, exc: Any, _regex: Any, *args: Any, **kwargs: Any) -> Any:
        return self.assertRaises(exc, *args, **kwargs)

    unittest.TestCase.assertRaisesRegex = raises_type  # type: ignore[method-assign]
    unittest.TestCase.assertRaisesRegexp = raises_type  # type: ignore[attr-defined]
    import tensorflow as tf

    def raises_op_error(self: Any, _regex: Any) -> Any:
        return self.assertRaises(tf.errors.OpError)

    tf.test.TestCase.assertRaisesOpError = raises_op_error  # type: ignore[method-assign]


def child(
    workdir: str, module_file: str, bridge: bool, pattern: str | None, out: str, messages: bool, tf1: bool
) -> None:
    """Import one test module and run its cases; write ``{id: outcome}`` (or the import
    error) as JSON to ``out``."""
    import unittest

    if not messages:
        _types_only()
    if tf1:
        import tensorflow as tf

        tf.compat.v1.disable_v2_behavior()
    if bridge:
        import tf_bridge

        tf_bridge.install()
        _serve_support(Path(workdir) / "support")
    sys.path.insert(0, str(Path(workdir) / "tests"))
    name = Path(module_file).stem
    try:  # importing the module and making its cases (their __init__ may read names too)
        suite = unittest.defaultTestLoader.loadTestsFromModule(__import__(name))
    except Exception as exc:  # the module's cases cannot run
        Path(out).write_text(json.dumps({"import_error": f"{type(exc).__name__}: {exc}"}))
        return
    cases: list[Any] = []

    def flatten(s: Any) -> None:
        for t in s:
            flatten(t) if isinstance(t, unittest.TestSuite) else cases.append(t)

    flatten(suite)
    if pattern:
        cases = [c for c in cases if pattern in c.id()]
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(unittest.TestSuite(cases))
    details: dict[str, str] = {}
    for case, tb in result.failures + result.errors:
        mode = case.id()[len(_case_id(case)) :].strip()  # " [graph_mode]" for a subtest
        details.setdefault(_case_id(case), "")
        details[_case_id(case)] += f"{mode} {tb.strip().splitlines()[-1]} ".lstrip()
    Path(out).write_text(
        json.dumps({"cases": _outcomes(result, [c.id() for c in cases]), "details": details})
    )


# ---- the parent ----------------------------------------------------------------------


def run_module(python: str, workdir: Path, module: str, bridge: bool, args: Any) -> dict[str, Any]:
    out = workdir / f"{Path(module).stem}.{'bridge' if bridge else 'tf215'}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_USE_LEGACY_KERAS", None)  # TF 2.15's Keras is Keras 2; tf_bridge needs tf_keras
    if bridge:
        env.update(TF_USE_LEGACY_KERAS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    else:
        env.pop("PYTHONPATH", None)
    cmd = [python, __file__, "--_child", str(workdir), module, str(out), "1" if bridge else "0"]
    cmd += [args.k or "", "1" if args.messages else "0", "1" if module in args.tf1_modules else "0"]
    log = workdir / f"{Path(module).stem}.{'bridge' if bridge else 'tf215'}.log"
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, env=env, stdout=fh, stderr=fh, timeout=args.timeout, cwd=workdir)
        except subprocess.TimeoutExpired:
            return {"import_error": f"timed out after {args.timeout} s (log {log})"}
    if not out.exists():
        return {"import_error": f"child exited {proc.returncode} without a result (log {log})"}
    return json.loads(out.read_text())


def counts(result: dict[str, Any]) -> str:
    if "import_error" in result:
        return f"import  ({result['import_error'][:90]})"
    values = list(result["cases"].values())
    return "  ".join(f"{k} {values.count(k):3d}" for k in ("passed", "failed", "error", "skipped"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "modules", nargs="+", help="paths under tensorflow_estimator/python/estimator or groups"
    )
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--tf215", action="store_true", help="run in TF 2.15's venv only")
    side.add_argument("--both", action="store_true", help="run under tf_bridge and TF 2.15")
    parser.add_argument("-k", help="run only the cases whose id contains this string")
    parser.add_argument("--list", action="store_true", help="list the cases that did not pass")
    parser.add_argument("--json", help="write every case's outcome to this file")
    parser.add_argument("--messages", action="store_true", help="keep assertRaisesRegex's message checks")
    parser.add_argument(
        "--standin-inputs",
        action="store_true",
        help="serve upstream's inputs/ (numpy_io, ...) under tf_bridge",
    )
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--rev", default="v2.15.0", help="the mirror's revision (TF 2.15's by default)")
    parser.add_argument("--python", default=sys.executable, help="the tf_bridge side's python")
    parser.add_argument("--tf215-python", default=TF215_PYTHON)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per module and side")
    parser.add_argument(
        "--workdir", help="extract and log here, and keep it (default: a temporary directory)"
    )
    return parser


def _print_result(label: str, module: str, result: dict[str, Any], listing: bool) -> None:
    print(f"{label:6s} {module:48s} {counts(result)}", flush=True)
    if listing:
        for case, outcome in sorted(result.get("cases", {}).items()):
            if outcome not in ("passed", "skipped"):
                print(f"    {outcome:7s} {case}  {result['details'].get(case, '')[:160]}")


def _print_totals(report: dict[str, Any], labels: list[str]) -> None:
    for label in labels:
        totals = dict.fromkeys(("passed", "failed", "error", "skipped"), 0)
        for sides in report.values():
            for outcome in sides[label].get("cases", {}).values():
                totals[outcome] += 1
        not_imported = sum("import_error" in r[label] for r in report.values())
        print(f"{label:6s} total: " + "  ".join(f"{k} {v}" for k, v in totals.items()), end="")
        print(f"  modules not imported {not_imported}")
    if len(labels) == 2:  # the cases TF 2.15 passes that tf_bridge does not pass or cannot run
        lost = [
            (m, c, r["bridge"].get("cases", {}).get(c, "not run"))
            for m, r in report.items()
            for c, o in r["tf215"].get("cases", {}).items()
            if o == "passed" and r["bridge"].get("cases", {}).get(c) != "passed"
        ]
        print(f"passed by TF 2.15, not by tf_bridge: {len(lost)}", end="")
        print(f" ({sum(o == 'not run' for _, _, o in lost)} not run)")


def main(argv: list[str]) -> int:
    """The command line (see the module docstring); 0 whatever the cases' outcomes."""
    if argv[:1] == ["--_child"]:
        workdir, module, out, bridge, pattern, messages, tf1 = argv[1:8]
        child(workdir, module, bridge == "1", pattern or None, out, messages == "1", tf1 == "1")
        return 0
    args = _parser().parse_args(argv)
    modules = expand(args.modules)
    sides = (
        [("tf215", False)] if args.tf215 else [("bridge", True)] + ([("tf215", False)] if args.both else [])
    )
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="upstream_tests_") as tmp:
        workdir = Path(args.workdir or tmp)
        extract(args.mirror, args.rev, modules, workdir, args.standin_inputs)
        args.tf1_modules = tf1_modules(args.mirror, args.rev, modules)
        for module in modules:
            for label, bridge in sides:
                python = args.python if bridge else args.tf215_python
                result = run_module(python, workdir, module, bridge, args)
                report.setdefault(module, {})[label] = result
                _print_result(label, module, result, args.list)
    _print_totals(report, [label for label, _ in sides])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
