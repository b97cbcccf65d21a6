"""A clean console: the examples write under runs/<name> (gitignored, one directory per
example, not a new /tmp directory per run), import TensorFlow through tf_bridge (no C++
start-up lines), and tf_bridge sets TF_CPP_MIN_LOG_LEVEL only when the user did not."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_write_under_runs_not_tmp(path):
    source = path.read_text()
    assert "tempfile" not in source and "mkdtemp" not in source
    assert "fresh_run_dir(" in source
    lines = source.splitlines()
    for i, line in enumerate(lines):  # TensorFlow only after tf_bridge (which imports it quietly)
        if line.strip().startswith(("import tensorflow", "from tensorflow")):
            assert any("import tf_bridge" in ln for ln in lines[:i]), f"{path.name}:{i + 1}"


def test_fresh_run_dir_is_gitignored_and_emptied():
    sys.path.insert(0, str(ROOT))
    from examples._runs import fresh_run_dir

    path = fresh_run_dir("console_test")
    try:
        assert pathlib.Path(path).parent == ROOT / "runs"
        pathlib.Path(path, "old").write_text("x")
        assert fresh_run_dir("console_test") == path and os.listdir(path) == []
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert ignored.returncode == 0, "runs/ must be gitignored"
    finally:
        os.rmdir(path)


@pytest.mark.parametrize("user", [None, "0"])
def test_tf_cpp_min_log_level_set_only_when_unset(user):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if user is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = user
    code = "import os, json, tf_bridge; print('RESULT', json.dumps(os.environ.get('TF_CPP_MIN_LOG_LEVEL')))"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert got == (user if user is not None else "1")
    assert "absl::InitializeLog" not in run.stderr
    assert not [ln for ln in run.stderr.splitlines() if ln.startswith("I0000")], run.stderr
