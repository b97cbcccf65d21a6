"""TensorBoard event files (through tensorboardX), written by process 0 only.

Training's scalars (``write_scalars``: the loss, ``global_step/sec``, ...) go into an
event file written in the caller's thread and flushed to the operating system at
tf.estimator's cadence (its FileWriter's ``flush_secs=120``, checked at each write) and
by ``flush_all()``, which every checkpoint save calls: a process killed with SIGKILL
loses no summary older than its last checkpoint. The ``SummaryWriter`` of ``writer()``
(``jaxspec.summary``) writes from tensorboardX's thread; ``flush_all()`` flushes what
that thread has written.

A logdir in an object store (``gs://bucket/run``) is written through
``jaxspec.store.paths``: tensorboardX's writer for that scheme is replaced by one that
keeps the file's events in memory and uploads the whole object at each flush (an object
cannot be appended to, and a new upload replaces it whole). The flush cadence above is
then also the upload cadence.
"""

from __future__ import annotations

import io
import os
import socket
import threading
import time
from typing import Any

import jax
import numpy as np

from jaxspec.store import paths

FLUSH_SECS = 120.0  # tf.estimator's FileWriter default (FileWriterCache)

_writers: dict[str, Any] = {}
_scalar_files: dict[str, _ScalarFile] = {}
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


class _StoreRecordWriter:
    """A tensorboardX record writer for one event file in an object store."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._buffer = io.BytesIO()
        self._uploaded = -1  # bytes in the object after the last upload

    def write(self, data: bytes) -> None:
        self._buffer.write(data)

    def flush(self) -> None:
        if self._buffer.tell() != self._uploaded:
            paths.write_bytes_atomic(self.path, self._buffer.getvalue())
            self._uploaded = self._buffer.tell()

    def close(self) -> None:
        self.flush()


class _StoreWriterFactory:
    def open(self, path: str) -> _StoreRecordWriter:
        return _StoreRecordWriter(path)

    def directory_check(self, path: str) -> None:
        """An object store has no directories to make."""


def _prepare_logdir(logdir: str) -> None:
    """Make ``logdir`` (a local one), or route tensorboardX's writes to its store."""
    if not paths.is_url(logdir):
        os.makedirs(logdir, exist_ok=True)
        return
    from tensorboardX import record_writer

    record_writer.register_writer_factory(logdir.split("://", 1)[0], _StoreWriterFactory())


class _ScalarFile:
    """One event file of scalars, written synchronously (tensorboardX's ``EventsWriter``,
    no thread or queue), flushed every ``FLUSH_SECS`` and on ``flush()``."""

    def __init__(self, logdir: str, suffix: str) -> None:
        from tensorboardX.event_file_writer import EventsWriter

        _prepare_logdir(logdir)
        self._events = EventsWriter(paths.join(logdir, "events"), suffix)  # writes file_version
        self._flushed = time.monotonic()
        self._pending = True

    def write(self, step: int, items: list[tuple[str, float]]) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        now = time.time()
        for name, value in items:
            self._events.write_event(Event(summary=scalar(name, value), step=step, wall_time=now))
        self._pending = True
        if time.monotonic() - self._flushed >= FLUSH_SECS:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._events.flush()
            self._pending = False
        self._flushed = time.monotonic()

    def close(self) -> None:
        self._events.close()


def writer(logdir: str) -> Any:
    """A cached ``tensorboardX.SummaryWriter`` for ``logdir`` (one per directory)."""
    from tensorboardX import SummaryWriter

    with _lock:
        if logdir not in _writers:
            _prepare_logdir(logdir)
            _writers[logdir] = SummaryWriter(logdir=logdir, filename_suffix=_suffix())
        return _writers[logdir]


def write_scalars(logdir: str, step: int, scalars: dict[str, Any]) -> None:
    """Queue each scalar-valued entry of ``scalars`` at ``step``; non-scalar values are
    skipped. Only process 0 writes (the chief, as tf.estimator). The file is flushed
    every ``FLUSH_SECS``, at each checkpoint (``flush_all``) and when train and
    evaluate close every writer at their end."""
    if jax.process_index() != 0:
        return
    items = _scalar_items(scalars)
    with _lock:
        if logdir not in _scalar_files:
            _scalar_files[logdir] = _ScalarFile(logdir, _suffix())
        _scalar_files[logdir].write(int(step), items)


def flush_all() -> None:
    """Put every event written so far in this process into the operating system's hands
    (a SIGKILL then loses none): training's scalar files, and what the SummaryWriters'
    threads have written. Called at every checkpoint save."""
    with _lock:
        files, writers = list(_scalar_files.values()), list(_writers.values())
        for f in files:
            f.flush()
    for w in writers:
        w.flush()


def write_event_file(logdir: str, step: int, scalars: dict[str, Any]) -> None:
    """Write a new event file in ``logdir`` holding each scalar-valued entry of
    ``scalars`` at ``step``, synchronously: the file is complete and closed when this
    returns (what each tf.estimator ``evaluate`` call leaves in ``eval/``), without the
    background thread and queue of a ``SummaryWriter``. As TF's FileWriter, the file is
    handed to the operating system, not fsynced. Non-scalar values are skipped; only
    process 0 writes. A writer ``logdir`` has in this process (host_call summaries) is
    closed first, so its events come before these.

    Raises:
      OSError: ``logdir`` cannot be created or written.
    """
    if jax.process_index() != 0:
        return
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import RecordWriter
    from tensorboardX.summary import scalar

    close(logdir)
    _prepare_logdir(logdir)
    with _lock:
        suffix = _suffix()
    now = time.time()
    # tensorboardX's EventsWriter's name and first event, without its fsync on close.
    name = f"events.out.tfevents.{str(now)[:10]}.{socket.gethostname()}{suffix}"
    records = RecordWriter(paths.join(logdir, name))
    try:
        records.write(Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        for tag, value in _scalar_items(scalars):
            event = Event(summary=scalar(tag, value), step=int(step), wall_time=time.time())
            records.write(event.SerializeToString())
    finally:
        records.close()  # a local file is closed; an object is uploaded whole


def close(logdir: str) -> None:
    """Close ``logdir``'s writer, so every queued event is on disk (a later write opens a
    new event file, as each tf.estimator train/evaluate call does)."""
    with _lock:
        w = _writers.pop(logdir, None)
        f = _scalar_files.pop(logdir, None)
        if f is not None:
            f.close()
    if w is not None:
        w.close()


def close_all() -> None:
    """Close every cached writer (at interpreter exit or in tests)."""
    with _lock:
        for w in _writers.values():
            w.close()
        _writers.clear()
        for f in _scalar_files.values():
            f.close()
        _scalar_files.clear()
