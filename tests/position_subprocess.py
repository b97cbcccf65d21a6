"""Training whose every step reads other rows, in its own process, for the kill tests.

Usage: python tests/position_subprocess.py MODEL_DIR MAX_STEPS SLEEP_SECS KIND
KIND: ``tfdata`` (a shuffled, repeated tf.data.Dataset) or ``stateful`` (an iterator with
get_state()/set_state()). A checkpoint every step; each step sleeps SLEEP_SECS.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import jaxspec
from tests.helpers import digits, init_fn, make_model_fn

ROWS, BATCH = 200, 16


class PermutedBatches:
    """A grain-like iterator: batches of a fresh permutation each epoch; its position is
    ``{'epoch', 'index'}`` (get_state/set_state)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, seed: int = 0) -> None:
        self.x, self.y, self.seed = x, y, seed
        self.epoch, self.index = 0, 0

    def __iter__(self) -> PermutedBatches:
        return self

    def __next__(self):
        order = np.random.default_rng(self.seed + self.epoch).permutation(len(self.x))
        rows = order[self.index : self.index + BATCH]
        self.index += BATCH
        if self.index + BATCH > len(self.x):
            self.epoch, self.index = self.epoch + 1, 0
        return {"x": self.x[rows]}, self.y[rows]

    def get_state(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def set_state(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def input_fn_for(kind: str):
    x, y = digits(ROWS)

    def stateful():
        return PermutedBatches(x, y)

    def tfdata():
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
        return (
            ds.shuffle(ROWS, seed=1, reshuffle_each_iteration=True).repeat().batch(BATCH, drop_remainder=True)
        )

    def generator():
        it = PermutedBatches(x, y)
        return (next(it) for _ in iter(int, 1))

    return {"stateful": stateful, "tfdata": tfdata, "generator": generator}[kind]


class Slow(jaxspec.SessionRunHook):
    def __init__(self, secs: float) -> None:
        self.secs = secs

    def after_run(self, run_context, run_values):
        time.sleep(self.secs)
        print("step done", flush=True)


def make_estimator(model_dir: str) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=1,
        keep_checkpoint_max=3,
        log_step_count_steps=None,
        tf_random_seed=3,
    )
    return jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)


if __name__ == "__main__":
    model_dir, max_steps, sleep, kind = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    make_estimator(model_dir).train(input_fn_for(kind), max_steps=max_steps, hooks=[Slow(sleep)])
    print("finished", flush=True)
