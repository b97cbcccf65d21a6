"""TensorBoard event files (through tensorboardX), written by process 0 only."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import jax
import numpy as np

_writers: dict[str, Any] = {}
_lock = threading.Lock()
_last_ns = 0


def _next_time_ns() -> int:
    """Wall-clock nanoseconds, strictly increasing across calls in this process (call
    with ``_lock`` held)."""
    global _last_ns
    _last_ns = max(time.time_ns(), _last_ns + 1)
    return _last_ns


def writer(logdir: str) -> Any:
    """A cached ``tensorboardX.SummaryWriter`` for ``logdir`` (one per directory)."""
    from tensorboardX import SummaryWriter

    with _lock:
        if logdir not in _writers:
            # tensorboardX names files by the second (then the host), and TensorBoard reads
            # a directory's files in name order. The suffix keeps that order the write
            # order within a second: a zero-padded nanosecond time (strictly increasing in
            # this process), then the pid (also keeps a second writer from truncating the
            # first file of the same second).
            _writers[logdir] = SummaryWriter(
                logdir=logdir, filename_suffix=f".{_next_time_ns():020d}.{os.getpid()}"
            )
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
