"""A plain Estimator that stalls, for the hang watchdog tests.

Usage: python tests/hang_worker.py MODEL_DIR input|hook EXIT_ON_HANG(0|1)
``input``: input_fn yields STALL_AFTER batches, then blocks in ``block_forever``.
``hook``: a hook's after_run sleeps HOOK_SLEEP_SECS once, at global step STALL_AFTER,
then training goes on to MAX_STEPS. hang_timeout_secs is HANG_SECS. Log records carry
their time (``time.time()``); the stall's start is printed as ``stalled at T``.
"""

from __future__ import annotations

import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

import jaxspec

HANG_SECS, STALL_AFTER, HOOK_SLEEP_SECS, MAX_STEPS = 2.0, 6, 4.0, 12


def block_forever() -> None:
    print(f"stalled at {time.time():.3f}", flush=True)
    while True:
        time.sleep(3600)


def input_fn(stall: bool):
    x = np.ones((4, 2), np.float32)
    for i in range(1_000_000):
        if stall and i == STALL_AFTER:
            block_forever()
        yield {"x": x}, x.sum(1)


def model_fn(features, labels, mode, state):
    loss, grads = jax.value_and_grad(lambda s: jnp.mean((features["x"] @ s - labels) ** 2))(state)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state - 0.1 * grads)


class SleepOnce(jaxspec.SessionRunHook):
    """Sleeps HOOK_SLEEP_SECS in after_run at global step STALL_AFTER."""

    def after_run(self, run_context, run_values):
        if run_context.session.global_step == STALL_AFTER:
            print(f"stalled at {time.time():.3f}", flush=True)
            time.sleep(HOOK_SLEEP_SECS)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(created).3f %(levelname)s:%(name)s:%(message)s")
    model_dir, kind, exit_on_hang = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        steps_per_execution=1,
        hang_timeout_secs=HANG_SECS,
        exit_on_hang=exit_on_hang,
    )
    est = jaxspec.Estimator(model_fn, config=config, init_fn=lambda: jnp.zeros(2, jnp.float32))
    hooks = [SleepOnce()] if kind == "hook" else []
    est.train(lambda: input_fn(kind == "input"), hooks=hooks, max_steps=MAX_STEPS)
    print("finished", flush=True)
