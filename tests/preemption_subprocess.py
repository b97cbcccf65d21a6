"""A plain Estimator trained with grouped steps in its own process, for the SIGTERM test.

Usage: python tests/preemption_subprocess.py MODEL_DIR MAX_STEPS [SIGNALS]
(SIGNALS: RunConfig.preemption_signals by name, comma-separated, e.g. ``SIGUSR1,SIGTERM``.)
Linear regression by SGD on batches that depend on their index (an iterator with
get_state()/set_state(), so a resumed run reads on where the checkpoint stopped). Each
step also sleeps ``STEP_SLEEP_SECS`` on the host through a callback (a stand-in for a
step's device time), and dispatches aim at ``DISPATCH_SECS`` seconds, so one dispatch
runs at most ``MAX_CAP`` steps. ``save_checkpoints_steps=1000``; a hook that opts in
(reads no state, never stops) prints the global step every 250 steps, so groups hold
250 steps. At exit it prints ``cap=<the last steps-per-dispatch bound>``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

import jaxspec
from jaxspec.loop import dispatch_bound

STEP_SLEEP_SECS = 0.002
DISPATCH_SECS = 0.05
MAX_CAP = 16  # floor_pow2(DISPATCH_SECS / STEP_SLEEP_SECS): a step takes at least the sleep
BATCH, DIM, LR = 8, 4, 0.05
TRUE_W = np.array([1.0, -2.0, 3.0, 0.5], np.float32)


def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch of global step i + 1: rows from a generator seeded by i."""
    x = np.random.default_rng(i).normal(size=(BATCH, DIM)).astype(np.float32)
    return x, (x @ TRUE_W + 0.1).astype(np.float32)


class IndexedBatches:
    """Batch i, then i + 1, ...; its position is ``{'i'}`` (get_state/set_state)."""

    def __init__(self) -> None:
        self.i = 0

    def __iter__(self) -> IndexedBatches:
        return self

    def __next__(self):
        x, y = batch(self.i)
        self.i += 1
        return {"x": x}, y

    def get_state(self) -> dict:
        return {"i": self.i}

    def set_state(self, state: dict) -> None:
        self.i = int(state["i"])


def init_fn():
    return {"w": jnp.zeros(DIM, jnp.float32), "b": jnp.zeros((), jnp.float32)}


def _sleep(loss):
    time.sleep(STEP_SLEEP_SECS)
    return np.zeros((), np.float32)


def model_fn(features, labels, mode, state):
    def loss_of(s):
        return jnp.mean((features["x"] @ s["w"] + s["b"] - labels) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(state)
    # the step's update waits for the host's sleep (a data dependency on its zero)
    zero = io_callback(_sleep, jax.ShapeDtypeStruct((), jnp.float32), loss, ordered=True)
    new = jax.tree.map(lambda p, g: p - LR * g + zero, state, grads)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new)


def estimator(model_dir: str, signals: tuple[int, ...] = (signal.SIGTERM,)) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        preemption_signals=signals,
        save_checkpoints_steps=1000,
        log_step_count_steps=None,
        save_summary_steps=None,
        keep_checkpoint_max=None,
    )
    return jaxspec.Estimator(model_fn, config=config, init_fn=init_fn)


def hand_params(steps: int) -> dict[str, np.ndarray]:
    """The same SGD by hand (numpy, float64), ``steps`` steps from zeros."""
    w, b = np.zeros(DIM), 0.0
    for i in range(steps):
        x, y = batch(i)
        r = x @ w + b - y
        w, b = w - LR * 2 * x.T @ r / BATCH, b - LR * 2 * r.mean()
    return {"w": w, "b": np.asarray(b)}


class PrintEvery250(jaxspec.SessionRunHook):
    """Prints the global step every 250 steps; says it reads no state and never stops."""

    def next_required_step(self, global_step):
        return (global_step // 250 + 1) * 250

    def reads_state_after(self, step):
        return False

    def may_stop_after(self, step):
        return False

    def after_run(self, run_context, run_values):
        print(f"at step {run_context.session.global_step}", flush=True)


if __name__ == "__main__":
    dispatch_bound.DISPATCH_SECS = DISPATCH_SECS
    model_dir, max_steps = sys.argv[1], int(sys.argv[2])
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["SIGTERM"]
    est = estimator(model_dir, tuple(signal.Signals[name] for name in names))
    try:
        est.train(IndexedBatches, hooks=[PrintEvery250()], max_steps=max_steps)
    finally:
        bound = dispatch_bound.DispatchBound(est._compile_cache.modes["train"], 1000, lambda: False)
        print(f"cap={bound.cap()} step_secs={bound.step_secs}", flush=True)
    print("finished", flush=True)
