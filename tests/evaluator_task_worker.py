"""One task of the three-process evaluator test; TF_CONFIG names the task.

Usage: python tests/evaluator_task_worker.py MODEL_DIR OUT_JSON. Every task runs the same
``train_and_evaluate``: the chief and the worker (4 CPU devices each) train the test MLP
to global step 6 with a checkpoint every 3 steps; the evaluator (1 device) evaluates
them. The chief's saving listener waits after each save until the evaluator has
exported that step, so every checkpoint is the newest when the evaluator looks and the
schedule is the same in every run. Writes what the task saw to OUT_JSON; the evaluator
also logs each exporter call to ``evaluated.jsonl`` next to it.
"""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":
    _KIND = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    _DEVICES = 1 if _KIND == "evaluator" else 4
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={_DEVICES}"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxspec  # noqa: E402
from tests.helpers import init_fn, make_model_fn  # noqa: E402
from tests.multiprocess_worker import EVAL_BATCH, TRAIN_BATCH, eval_input_fn, train_input_fn  # noqa: E402

MAX_STEPS, SAVE_EVERY, WAIT_SECS = 6, 3, 240


def serving_input_receiver_fn():
    """TensorFlow is imported only where an export runs (the evaluator)."""
    import tensorflow as tf

    import tf_bridge

    return tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})()


class Recorder(jaxspec.Exporter):
    """Logs each call (after the BestExporter's, so a logged step is fully exported)."""

    name = "recorder"

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        entry = {
            "step": int(eval_result["global_step"]),
            "final": bool(is_the_final_export),
            "checkpoint_path": checkpoint_path,
            "metrics": {k: float(v) for k, v in eval_result.items()},
        }
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class WaitForEvaluation(jaxspec.CheckpointSaverListener):
    """The chief holds training after a save until the evaluator has logged that step."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path

    def after_save(self, session, global_step_value):
        deadline = time.monotonic() + WAIT_SECS
        while time.monotonic() < deadline:
            if os.path.exists(self.log_path):
                with open(self.log_path) as f:
                    if any(json.loads(line)["step"] == global_step_value for line in f):
                        return
            time.sleep(0.1)
        raise RuntimeError(f"the evaluator did not evaluate global step {global_step_value}")


def make_estimator(model_dir: str) -> jaxspec.TPUEstimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=SAVE_EVERY,
        log_step_count_steps=None,
        save_summary_steps=0,
        tf_random_seed=1,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=SAVE_EVERY),
    )
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=config,
        train_batch_size=TRAIN_BATCH,
        eval_batch_size=EVAL_BATCH,
        init_fn=init_fn,
    )


if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    log_path = os.path.join(os.path.dirname(out), "evaluated.jsonl")
    est = make_estimator(model_dir)
    best = jaxspec.BestExporter(serving_input_receiver_fn=serving_input_receiver_fn, exports_to_keep=None)
    train_spec = jaxspec.TrainSpec(
        train_input_fn, max_steps=MAX_STEPS, saving_listeners=[WaitForEvaluation(log_path)]
    )
    eval_spec = jaxspec.EvalSpec(
        eval_input_fn, steps=None, start_delay_secs=0, throttle_secs=0, exporters=[best, Recorder(log_path)]
    )
    started = time.monotonic()
    result = jaxspec.train_and_evaluate(est, train_spec, eval_spec)
    import jax

    summary = {
        "task": _KIND,
        "task_type": est.config.task_type,
        "processes": jax.process_count(),
        "devices": len(jax.devices()),
        "seconds": time.monotonic() - started,
        "result": None,
    }
    if result is not None:
        metrics, exports = result
        summary["result"] = {
            "metrics": {k: float(v) for k, v in metrics.items()},
            "exports": [None if e is None else e.decode() for e in exports],
        }
    with open(out, "w") as f:
        json.dump(summary, f)
