"""Pieces the training benchmarks share: the digits batches and a per-loop clock hook."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sklearn.datasets import load_digits

import jaxspec


def digits_batches(steps: int, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` global batches from shuffled epochs of the digits: x float32
    ``[steps, batch, 64]`` in [0, 1] and y int32 ``[steps, batch]``."""
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    rng, xs, ys = np.random.RandomState(seed), [], []
    while len(xs) < steps:
        idx = rng.permutation(len(x))
        for s in range(0, len(idx) - batch + 1, batch):
            xs.append(x[idx[s : s + batch]])
            ys.append(y[idx[s : s + batch]])
    return np.stack(xs[:steps]), np.stack(ys[:steps])


class LoopClock(jaxspec.SessionRunHook):
    """Records ``time.perf_counter()`` (seconds) and the loss at the end of every loop."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.losses: list[float] = []

    def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
        """Fetch the loss."""
        return jaxspec.SessionRunArgs("loss")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Record the time and the loss."""
        self.times.append(time.perf_counter())
        self.losses.append(float(run_values.results))
