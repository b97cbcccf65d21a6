"""Orbax set up for checkpoints that one process writes and reads alone (a node-local
tier, ``jaxspec.store.local_tier``) while several processes run.

Orbax's defaults assume one checkpoint written by every process together: process 0
creates directories and signals the others, writes numpy leaves, and a jax.Array only
this process holds (not a global one) is refused. Here this process is its own primary
host, its barriers wait for no other, and its global arrays are written from every
shard it holds (``replica_id=None``), as Orbax's own emergency checkpointing writes a
replica slice's local checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


class _NoMergeNotice(logging.Filter):
    """Drops Orbax's warning that a checkpoint has no per-process OCDBT parts to merge:
    one process writing alone is expected to (one line per local save otherwise)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping merge of OCDBT checkpoints" not in record.getMessage()


_FILTER = _NoMergeNotice()


def options() -> Any:
    """``MultiprocessingOptions`` of this process alone (Orbax's notice that such a
    checkpoint has nothing to merge is silenced from here on)."""
    if _FILTER not in logging.getLogger("absl").filters:
        logging.getLogger("absl").addFilter(_FILTER)
    i = jax.process_index()
    return ocp.options.MultiprocessingOptions(
        primary_host=i, active_processes={i}, barrier_sync_key_prefix=f"jaxspec_local_{i}"
    )


def handler(multiprocessing: Any) -> Any:
    """A PyTreeCheckpointHandler writing every shard of a global array this process
    holds, and reading a leaf back whole as numpy."""
    registry = ocp.type_handlers.create_type_handler_registry(
        (
            jax.Array,
            ocp.type_handlers.ArrayHandler(primary_host=None, replica_id=None, use_replica_parallel=False),
        ),
        (np.ndarray, ocp.type_handlers.NumpyHandler()),  # restores: each leaf read whole into numpy
    )
    return ocp.PyTreeCheckpointHandler(
        use_ocdbt=True, multiprocessing_options=multiprocessing, type_handler_registry=registry
    )


def save_args(state: Any) -> Any:
    """The save arguments of ``handler``'s checkpoints."""
    return ocp.args.PyTreeSave(state)


def restore_args(abstract: Any) -> Any:
    """Restore arguments reading every leaf into numpy (``abstract``: numpy arrays)."""
    return ocp.args.PyTreeRestore(
        item=abstract, restore_args=jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract)
    )
