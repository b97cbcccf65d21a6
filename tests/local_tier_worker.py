"""Training with a node-local checkpoint tier, in its own process(es), for the local tier
tests (tests/test_local_checkpoint_tier*.py).

Usage:
  python tests/local_tier_worker.py one MODEL_DIR LOCAL_DIR MAX_STEPS SLEEP_SECS
    one process (a plain Estimator, one device): local saves every 2 steps, the
    model_dir's every 10; each step sleeps SLEEP_SECS (the test SIGKILLs it).
  python tests/local_tier_worker.py MODEL_DIR OUT_JSON   (TF_CONFIG names the cluster)
    one of two processes x 4 devices (TPUEstimator): trains to LOCAL_TIER_MAX_STEPS,
    LOCAL_TIER_DIR is the local tier; writes the restored step and final variables.
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__" and len(sys.argv) == 3:  # only a multi-process worker has 4 devices
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
else:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import jaxspec
from tests.helpers import digits, init_fn, make_model_fn
from tests.position_subprocess import PermutedBatches

ROWS, LOCAL_EVERY, MODEL_DIR_EVERY = 200, 2, 10
GLOBAL_BATCH = 32  # the two-process runs: 16 rows per process per step


def make_estimator(model_dir: str, local_dir: str | None) -> jaxspec.Estimator:
    """One device; local saves every LOCAL_EVERY steps (when ``local_dir``), the
    model_dir's every MODEL_DIR_EVERY."""
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=MODEL_DIR_EVERY,
        local_checkpoint_dir=local_dir,
        local_save_checkpoints_steps=LOCAL_EVERY if local_dir else None,
        log_step_count_steps=None,
        tf_random_seed=3,
    )
    return jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn, params={})


def input_fn():
    """A get_state()/set_state() iterator of 16-row batches of a fresh permutation per
    epoch: its position is saved with every checkpoint."""
    x, y = digits(ROWS)
    return PermutedBatches(x, y)


class Slow(jaxspec.SessionRunHook):
    def __init__(self, secs: float) -> None:
        self.secs = secs

    def after_run(self, run_context, run_values):
        time.sleep(self.secs)


class HostShare:
    """This process's share of global batch k: the 32 rows ``[32k, 32k + 32)`` of epoch
    e's permutation (seeded e), process p of n taking the p-th 32/n of them; its
    position is ``{'step'}``."""

    def __init__(self, process: int, processes: int) -> None:
        self.x, self.y = digits(ROWS)
        self.process, self.width, self.step = process, GLOBAL_BATCH // processes, 0

    def __iter__(self) -> HostShare:
        return self

    def __next__(self):
        per_epoch = ROWS // GLOBAL_BATCH
        epoch, k = divmod(self.step, per_epoch)
        order = np.random.default_rng(epoch).permutation(ROWS)
        start = k * GLOBAL_BATCH + self.process * self.width
        rows = order[start : start + self.width]
        self.step += 1
        return {"x": self.x[rows]}, self.y[rows]

    def get_state(self) -> dict:
        return {"step": self.step}

    def set_state(self, state: dict) -> None:
        self.step = int(state["step"])


def make_tpu_estimator(model_dir: str, local_dir: str | None) -> jaxspec.TPUEstimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=MODEL_DIR_EVERY,
        local_checkpoint_dir=local_dir,
        local_save_checkpoints_steps=LOCAL_EVERY if local_dir else None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tf_random_seed=1,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=1),
    )
    return jaxspec.TPUEstimator(
        make_model_fn(), config=config, train_batch_size=GLOBAL_BATCH, init_fn=init_fn, params={}
    )


def tpu_input_fn(params):
    return HostShare(params["context"].current_host, params["context"].num_hosts)


def _two(model_dir: str, out: str) -> None:
    import logging

    import jax

    restored: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            restored.append(record.getMessage())

    logging.getLogger("jaxspec").addHandler(Grab())
    logging.getLogger("jaxspec").setLevel(logging.INFO)
    est = make_tpu_estimator(model_dir, os.environ["LOCAL_TIER_DIR"])
    est.train(tpu_input_fn, max_steps=int(os.environ["LOCAL_TIER_MAX_STEPS"]))
    values = {k: v.tolist() for k, v in est._checkpoint_store().read().items()}
    with open(out, "w") as f:
        json.dump({"process": jax.process_index(), "log": restored, "values": values}, f)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        _two(sys.argv[1], sys.argv[2])
    else:
        model_dir, local_dir, max_steps, sleep = (
            sys.argv[2],
            sys.argv[3],
            int(sys.argv[4]),
            float(sys.argv[5]),
        )
        make_estimator(model_dir, local_dir).train(input_fn, max_steps=max_steps, hooks=[Slow(sleep)])
