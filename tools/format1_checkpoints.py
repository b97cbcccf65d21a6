"""Write the checkpoints of tests/data/checkpoints_format1: a model_dir whose checkpoints
(global steps 3 and 7) carry the first integrity record (SHA-256 of every file, written by
process 0), as jaxspec wrote them before the CRC-32 records per process.

Run it from the root of a checkout of a commit before that change (its jaxspec is the one
imported), e.g. ``git worktree add /tmp/old 3b18e68``:

    cd /tmp/old && .venv/bin/python /path/to/tools/format1_checkpoints.py OUT_MODEL_DIR

The values are those ``format1_state(step)`` gives, so a test computes them again.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's jaxspec, not an installed one

import numpy as np  # noqa: E402


def format1_state(step: int) -> dict:
    """The state saved at ``step``: numpy values a test can rebuild without jaxspec."""
    w = (np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 100.0 + step).astype(np.float32)
    return {"params": {"w": w, "b": np.arange(16, dtype=np.float32) * step}, "step": np.int64(step)}


def main() -> None:
    import jax

    from jaxspec.store import checkpoint_integrity
    from jaxspec.store.checkpoints import CheckpointStore

    assert not hasattr(checkpoint_integrity, "record_name"), "run it from a checkout before CRC-32 records"
    store = CheckpointStore(sys.argv[1])
    for step in (3, 7):
        store.save(step, jax.tree.map(jax.numpy.asarray, format1_state(step)))
        store.wait()
    store.close()
    print(f"wrote steps {store.all_steps()} in {store.directory}")


if __name__ == "__main__":
    main()
