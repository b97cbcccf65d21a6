"""The API reference builds from the docstrings (pdoc) without a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_docs.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "(0 warnings)" in done.stdout
    top = (tmp_path / "jaxspec.html").read_text()
    for name in ("TPUEstimator", "CrossShardOptimizer", "EstimatorSpec", "train_and_evaluate"):
        assert f'id="{name}"' in top, name
    hooks = (tmp_path / "jaxspec" / "hooks.html").read_text()
    for name in ("stop_if_no_decrease_hook", "make_early_stopping_hook", "LoggingTensorHook"):
        assert f'id="{name}"' in hooks, name
    assert (tmp_path / "jaxspec" / "summary.html").exists()
    assert (tmp_path / "tf_bridge.html").exists()
