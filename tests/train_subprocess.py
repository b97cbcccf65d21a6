"""A training run in its own process, for the kill -9 and SIGTERM tests.

Usage: python tests/train_subprocess.py MODEL_DIR MAX_STEPS SLEEP_SECS [train_and_evaluate | summaries]
Saves a checkpoint every step; each step sleeps SLEEP_SECS on the host so a test can
interrupt it part-way.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jaxspec
from tests.helpers import digits, init_fn, make_model_fn


class Slow(jaxspec.SessionRunHook):
    def __init__(self, secs: float) -> None:
        self.secs = secs

    def after_run(self, run_context, run_values):
        time.sleep(self.secs)
        print("step done", flush=True)


def make_estimator(model_dir: str, save_checkpoints_steps: int = 1, **settings) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=save_checkpoints_steps,
        **settings,
        keep_checkpoint_max=None,
        log_step_count_steps=None,
        tf_random_seed=3,
    )
    return jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)


def input_fn():
    x, y = digits(64)
    return {"x": x}, y


if __name__ == "__main__":
    model_dir, max_steps, sleep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    if sys.argv[4:] == ["summaries"]:  # a summary every step, a checkpoint every 3
        est = make_estimator(model_dir, 3, save_summary_steps=1)
        est.train(input_fn, max_steps=max_steps, hooks=[Slow(sleep)])
    elif sys.argv[4:] == ["train_and_evaluate"]:
        jaxspec.train_and_evaluate(
            make_estimator(model_dir),
            jaxspec.TrainSpec(input_fn, max_steps=max_steps, hooks=[Slow(sleep)]),
            jaxspec.EvalSpec(input_fn, steps=1, throttle_secs=3600),
        )
    else:
        make_estimator(model_dir).train(input_fn, max_steps=max_steps, hooks=[Slow(sleep)])
    print("finished", flush=True)
