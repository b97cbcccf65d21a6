"""TensorBoard event files (through tensorboardX), written by process 0 only."""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import jax
import numpy as np

_writers: dict[str, Any] = {}
_counter = itertools.count()
_lock = threading.Lock()


def writer(logdir: str) -> Any:
    """A cached ``tensorboardX.SummaryWriter`` for ``logdir`` (one per directory)."""
    from tensorboardX import SummaryWriter

    with _lock:
        if logdir not in _writers:
            # tensorboardX names files by the second and opens them for writing: a second
            # writer in the same second would truncate the first file. A pid and counter
            # suffix keeps every file (as TF's own writer names do).
            suffix = f".{os.getpid()}.{next(_counter)}"
            _writers[logdir] = SummaryWriter(logdir=logdir, filename_suffix=suffix)
        return _writers[logdir]


def write_scalars(logdir: str, step: int, scalars: dict[str, Any]) -> None:
    """Queue each scalar-valued entry of ``scalars`` at ``step``; non-scalar values are
    skipped. Only process 0 writes (the chief, as tf.estimator). The writer flushes on
    its own schedule; train and evaluate close every writer when they end."""
    if jax.process_index() != 0:
        return
    w = writer(logdir)
    for name, value in scalars.items():
        arr = np.asarray(value)
        if arr.size == 1 and np.issubdtype(arr.dtype, np.number):
            w.add_scalar(name, float(arr.reshape(())), global_step=int(step))


def close(logdir: str) -> None:
    """Close ``logdir``'s writer, so every queued event is on disk (a later write opens a
    new event file, as each tf.estimator train/evaluate call does)."""
    with _lock:
        w = _writers.pop(logdir, None)
    if w is not None:
        w.close()


def close_all() -> None:
    """Close every cached writer (at interpreter exit or in tests)."""
    with _lock:
        for w in _writers.values():
            w.close()
        _writers.clear()
