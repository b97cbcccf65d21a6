"""TensorBoard summaries from host code (host_call functions, hooks, scripts).

A thin layer over tensorboardX's ``SummaryWriter`` (an established writer library), one
cached writer per directory, written by process 0 only, as tf.estimator's chief does:

    def host_fn(global_step, loss):
        jaxspec.summary.scalar("loss", loss.mean(), global_step[0], logdir=model_dir)

The files are ordinary TensorBoard event files (``tensorboard --logdir``). tensorboardX
writes from a background thread: events are certainly on disk after ``flush(logdir)``
(which closes the writer; the next write opens a new event file) and at the end of
every train/evaluate call for model_dir's own writers.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxspec.store.summaries import close, writer


def create_file_writer(logdir: str) -> Any:
    """The cached ``tensorboardX.SummaryWriter`` of ``logdir`` (``tf.summary.create_file_writer``)."""
    return writer(logdir)


def _write(kind: str, logdir: str, *args: Any, **kwargs: Any) -> None:
    if jax.process_index() != 0:
        return
    getattr(writer(logdir), kind)(*args, **kwargs)


def scalar(name: str, value: Any, step: int, logdir: str) -> None:
    """Write one scalar (a number or size-1 array) at ``step``."""
    _write("add_scalar", logdir, name, float(np.asarray(value).reshape(())), global_step=int(step))


def histogram(name: str, values: Any, step: int, logdir: str, bins: str = "tensorflow") -> None:
    """Write a histogram of ``values`` (any numeric array) at ``step``."""
    _write("add_histogram", logdir, name, np.asarray(values), global_step=int(step), bins=bins)


def image(name: str, data: Any, step: int, logdir: str, dataformats: str = "HWC") -> None:
    """Write an image: float in [0, 1] or uint8, ``[H, W, C]`` (or ``dataformats``)."""
    _write("add_image", logdir, name, np.asarray(data), global_step=int(step), dataformats=dataformats)


def text(name: str, value: str, step: int, logdir: str) -> None:
    """Write a text summary at ``step``."""
    _write("add_text", logdir, name, value, global_step=int(step))


def flush(logdir: str) -> None:
    """Write every queued event of ``logdir`` to disk (closes its writer)."""
    close(logdir)
