"""Write the checkpoints of tests/data/checkpoints_format<F>: a model_dir whose
checkpoints (global steps 3 and 7) carry an integrity record of an earlier format, as
jaxspec wrote them then:

* format 1: SHA-256 of every file, written by process 0 (before ``3b18e68``'s successor);
* format 2: CRC-32 (``zlib``) per process, one checksum per file (up to ``4e73000``).

Run it from the root of a checkout of a commit that writes that format (its jaxspec is
the one imported), e.g. ``git worktree add /tmp/old 4e73000``:

    cd /tmp/old && .venv/bin/python /path/to/tools/old_format_checkpoints.py 2 OUT_MODEL_DIR

The values are those ``old_format_state(step)`` gives, so a test computes them again.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's jaxspec, not an installed one

import numpy as np  # noqa: E402


def old_format_state(step: int) -> dict:
    """The state saved at ``step``: numpy values a test can rebuild without jaxspec."""
    w = (np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 100.0 + step).astype(np.float32)
    return {"params": {"w": w, "b": np.arange(16, dtype=np.float32) * step}, "step": np.int64(step)}


def main() -> None:
    import jax

    from jaxspec.store import checkpoint_integrity
    from jaxspec.store.checkpoints import CheckpointStore

    wanted, out = int(sys.argv[1]), sys.argv[2]
    written = getattr(checkpoint_integrity, "_FORMAT", 1)  # format 1 had no number
    assert written == wanted, f"this checkout writes format {written}, not {wanted}"
    store = CheckpointStore(out)
    for step in (3, 7):
        store.save(step, jax.tree.map(jax.numpy.asarray, old_format_state(step)))
        store.wait()
    store.close()
    print(f"wrote steps {store.all_steps()} in {store.directory}")


if __name__ == "__main__":
    main()
