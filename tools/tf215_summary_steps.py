"""Record the steps at which TF 2.15's tf.estimator writes its training summaries.

Trains a linear model_fn (zero weights, plain gradient descent on a learning rate that
decays every step, summarised as ``learning_rate``) under several
``save_summary_steps`` / ``log_step_count_steps`` settings, and one run resumed from a
checkpoint at step 17, and writes to ``tests/data/tf215_summary_steps.json``, per run:
the ``(step, value)`` pairs of the ``loss``, ``learning_rate`` and ``global_step/sec``
scalars in model_dir's event files, and the ``step`` of each ``loss = ..., step = ...``
log line. ``tests/test_summary_steps_tf215.py`` trains the same model with jaxspec and
compares. Needs the TF 2.15 environment (CI does not run it)::

    /tmp/tf215venv/bin/python tools/tf215_summary_steps.py
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf215_summary_steps.json")
TAGS = ("loss", "learning_rate", "global_step/sec")

# name: (save_summary_steps, log_step_count_steps, max_steps of each train call)
RUNS: dict[str, tuple[Any, Any, list[int]]] = {
    "every_10": (10, 10, [35]),
    "summary_1_no_log": (1, None, [5]),
    "summary_10_no_log": (10, None, [35]),
    "summary_3_log_4": (3, 4, [13]),
    "resumed_at_17": (10, 10, [17, 35]),
}


def data() -> tuple[np.ndarray, np.ndarray]:
    """32 examples of 4 features, a linear target; batches of 8 in order, repeated."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32) + 0.3).astype(np.float32)
    return x, y


def input_fn() -> Any:
    x, y = data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(8).repeat()


def model_fn(features: Any, labels: Any, mode: Any) -> Any:
    w = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
    pred = tf.reduce_sum(features["x"] * w, axis=1) + b
    loss = tf.reduce_mean(tf.square(pred - labels))
    step = tf.compat.v1.train.get_global_step()
    lr = tf.compat.v1.train.exponential_decay(0.1, step, decay_steps=1, decay_rate=0.9)
    tf.compat.v1.summary.scalar("learning_rate", lr)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def scalars(model_dir: str) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {t: [] for t in TAGS}
    for name in sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(name):
            for v in event.summary.value:
                if v.tag in out:
                    out[v.tag].append([int(event.step), float(v.simple_value)])
    return out


def run(summary_steps: Any, log_steps: Any, calls: list[int]) -> dict[str, Any]:
    model_dir = tempfile.mkdtemp()
    # checkpoints at TF's default cadence (600 s): each call's last step is saved
    config = tf.estimator.RunConfig(save_summary_steps=summary_steps, log_step_count_steps=log_steps)
    lines = _Lines()
    logger = tf.get_logger()
    logger.addHandler(lines)
    try:
        for max_steps in calls:
            # a new Estimator per call, as a resumed program would make
            tf.estimator.Estimator(model_fn, model_dir, config=config).train(input_fn, max_steps=max_steps)
    finally:
        logger.removeHandler(lines)
    logged = [int(m.group(1)) for m in (re.match(r"loss = \S+, step = (\d+)", s) for s in lines.lines) if m]
    rate_lines = sum(1 for s in lines.lines if s.startswith("global_step/sec: "))
    return {
        "save_summary_steps": summary_steps,
        "log_step_count_steps": log_steps,
        "max_steps": calls,
        "scalars": scalars(model_dir),
        "loss_line_steps": logged,
        "global_step_sec_lines": rate_lines,
    }


def main() -> None:
    tf.get_logger().setLevel(logging.INFO)
    runs = {name: run(*args) for name, args in RUNS.items()}
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "runs": runs}, f, indent=1)
        f.write("\n")
    for name, r in runs.items():
        print(name, {t: [s for s, _ in v] for t, v in r["scalars"].items()}, r["loss_line_steps"])


if __name__ == "__main__":
    main()
