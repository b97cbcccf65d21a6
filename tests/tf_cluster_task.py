"""One task of a local TF_CONFIG cluster, for tests/test_tf_bridge_cluster.py.

Usage: TF_CONFIG=... python tests/tf_cluster_task.py MODEL_DIR MAX_STEPS OUT_JSON
Runs ``tf_bridge.train_and_evaluate`` on the reference linear model as the task
TF_CONFIG names. A trainer records the loss of each step it ran; the evaluator its
result; both into OUT_JSON. A worker starts once the chief's first checkpoint exists
(so it finds the variables initialised), without tf.estimator's start delay.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

import tf_bridge  # noqa: E402
from tools import tf215_reference_models as models  # noqa: E402


class Pace(tf.compat.v1.train.SessionRunHook):
    """Sleeps a little after each step so that the two trainers overlap."""

    def after_run(self, run_context, run_values):
        time.sleep(0.02)


def main(model_dir: str, max_steps: int, out: str) -> None:
    config = tf_bridge.RunConfig(
        tf_random_seed=1,
        save_checkpoints_steps=20,
        log_step_count_steps=10,  # StepCounterHook: its 'global step has not been increased' check
        experimental_max_worker_delay_secs=0,
    )
    if config.task_type == "worker":
        while not glob.glob(os.path.join(model_dir, "model.ckpt-*.index")):
            time.sleep(0.2)
    losses: list[float] = []
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, losses), model_dir, config=config)
    result = tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=max_steps, hooks=[Pace()]),
        tf_bridge.EvalSpec(models.eval_input_fn, steps=None, start_delay_secs=0, throttle_secs=1),
    )
    record = {"task": config.task_type, "losses": losses, "is_chief": config.is_chief}
    if result is not None:
        record["eval"] = {k: float(v) for k, v in result[0].items()}
    with open(out, "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
