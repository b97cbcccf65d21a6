"""Record what TF 2.15's tf.estimator writes to an eval directory's event files.

Runs a linear model_fn with two eval metrics (``accuracy``, ``mean_label``), trains to
step 2, evaluates, trains to step 4, evaluates, and writes, per evaluation, the scalar
tags of ``model_dir/eval`` to ``tests/data/tf215_eval_events.json``. The test
``tests/test_eval_events_tf215.py`` checks that jaxspec writes the same tags (no
``global_step`` scalar, ``loss`` and each metric) at the same steps. Needs a TF 2.15
environment (CI does not run it)::

    /tmp/tf215venv/bin/python tools/tf215_eval_events.py
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf215_eval_events.json")


def model_fn(features, labels, mode):
    w = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.reduce_sum(features["x"] * w, axis=1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    step = tf.compat.v1.train.get_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    metrics = {
        "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(logits > 0, tf.float32)),
        "mean_label": tf.compat.v1.metrics.mean(labels),
    }
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)


def input_fn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(8)


def main() -> None:
    model_dir = tempfile.mkdtemp()
    est = tf.estimator.Estimator(model_fn, model_dir)
    for steps in (2, 4):
        est.train(input_fn, max_steps=steps)
        est.evaluate(input_fn)
    records = []
    eval_dir = os.path.join(model_dir, "eval")
    for name in sorted(os.listdir(eval_dir)):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(eval_dir, name)):
            tags = sorted(v.tag for v in event.summary.value if v.HasField("simple_value"))
            if tags:
                records.append({"step": int(event.step), "scalar_tags": tags})
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "evaluations": records}, f, indent=1)
        f.write("\n")
    print(json.dumps(records))


if __name__ == "__main__":
    main()
