"""One of two processes (TF_CONFIG) training with an early stopping hook.

argv: model_dir, output JSON. Process 0's should_stop_fn says stop at its third call;
process 1's never does (it is never asked): every process must stop at the same step.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

import jaxspec  # noqa: E402
from tests.helpers import init_fn, make_model_fn  # noqa: E402
from tests.multiprocess_worker import train_input_fn  # noqa: E402


class LastStep(jaxspec.SessionRunHook):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def before_run(self, run_context):
        return jaxspec.SessionRunArgs("global_step")

    def after_run(self, run_context, run_values):
        self.steps.append(int(run_values.results))


if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=1),
    )
    est = jaxspec.TPUEstimator(make_model_fn(), config=config, train_batch_size=64, init_fn=init_fn)
    calls: list[int] = []

    def should_stop() -> bool:
        calls.append(1)
        return jax.process_index() == 0 and len(calls) == 3

    seen = LastStep()
    hook = jaxspec.hooks.make_early_stopping_hook(est, should_stop, run_every_secs=None, run_every_steps=2)
    est.train(train_input_fn, hooks=[hook, seen], steps=6)
    with open(out, "w") as f:
        json.dump({"process": jax.process_index(), "steps": seen.steps, "calls": len(calls)}, f)
