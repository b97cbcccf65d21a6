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


def _suffix() -> str:
    """An event file name's suffix (call with ``_lock`` held). tensorboardX names files by
    the second (then the host), and TensorBoard reads a directory's files in name order:
    a zero-padded nanosecond time (strictly increasing in this process) keeps that order
    the write order within a second, then the pid keeps a second process's file of the
    same second apart."""
    return f".{_next_time_ns():020d}.{os.getpid()}"


def _scalar_items(scalars: dict[str, Any]) -> list[tuple[str, float]]:
    """The numeric one-element entries of ``scalars`` as ``(name, float)``."""
    items = []
    for name, value in scalars.items():
        arr = np.asarray(value)
        if arr.size == 1 and np.issubdtype(arr.dtype, np.number):
            items.append((name, float(arr.reshape(()))))
    return items


def writer(logdir: str) -> Any:
    """A cached ``tensorboardX.SummaryWriter`` for ``logdir`` (one per directory)."""
    from tensorboardX import SummaryWriter

    with _lock:
        if logdir not in _writers:
            _writers[logdir] = SummaryWriter(logdir=logdir, filename_suffix=_suffix())
        return _writers[logdir]


def write_scalars(logdir: str, step: int, scalars: dict[str, Any]) -> None:
    """Queue each scalar-valued entry of ``scalars`` at ``step``; non-scalar values are
    skipped. Only process 0 writes (the chief, as tf.estimator). The writer flushes on
    its own schedule; train and evaluate close every writer when they end."""
    if jax.process_index() != 0:
        return
    w = writer(logdir)
    for name, value in _scalar_items(scalars):
        w.add_scalar(name, value, global_step=int(step))


def write_event_file(logdir: str, step: int, scalars: dict[str, Any]) -> None:
    """Write a new event file in ``logdir`` holding each scalar-valued entry of
    ``scalars`` at ``step``, synchronously: the file is complete, flushed and closed when
    this returns (what each tf.estimator ``evaluate`` call leaves in ``eval/``), without
    the background thread and queue of a ``SummaryWriter``. Non-scalar values are
    skipped; only process 0 writes. A writer ``logdir`` has in this process (host_call
    summaries) is closed first, so its events come before these.

    Raises:
      OSError: ``logdir`` cannot be created or written.
    """
    if jax.process_index() != 0:
        return
    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.summary import scalar

    close(logdir)
    os.makedirs(logdir, exist_ok=True)
    with _lock:
        suffix = _suffix()
    events = EventsWriter(os.path.join(logdir, "events"), suffix)  # writes the file_version event
    try:
        for name, value in _scalar_items(scalars):
            events.write_event(Event(summary=scalar(name, value), step=int(step), wall_time=time.time()))
    finally:
        events.close()  # flushes, fsyncs and closes the file


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
