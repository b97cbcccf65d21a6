"""Where the examples write: ``runs/<name>`` at the repository root (gitignored), the same
directory on every run, emptied when a run starts (a run does not resume the last one's
checkpoints unless asked with ``--model_dir``)."""

from __future__ import annotations

import os
import shutil

RUNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs")


def fresh_run_dir(name: str) -> str:
    """``runs/<name>``, emptied (made if missing)."""
    path = os.path.join(RUNS, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path
