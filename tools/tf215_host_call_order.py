"""Reference values for a host_call that is passed the global step: what TF 2.15's
``TPUEstimator(use_tpu=False)`` hands its host_fn at each training step.

The program (``model_fn``) is a linear model trained by gradient descent whose host_call is
``(host_fn, [global_step, loss])``, the global step given as the variable itself
(``'var'``) or as a tensor read in model_fn (``'reshape'``: ``tf.reshape(global_step,
[1])``, the TPU examples' idiom). This records, per variant, the (step, loss) pairs host_fn
received over ``STEPS`` steps into ``tests/data/tf215_host_call_order.json``;
``tests/test_tf_host_call_order.py`` runs the same program through tf_bridge's
TPUEstimator and NPUEstimator (``NPUEstimatorSpec``).

Run it in a TF 2.15 virtual environment (CI never does)::

    /tmp/tf215venv/bin/python tools/tf215_host_call_order.py
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_PATH = os.path.join(ROOT, "tests", "data", "tf215_host_call_order.json")
STEPS = 12
BATCH = 4
VARIANTS = ("var", "reshape")


def input_fn(tf: Any) -> Callable[..., Any]:
    """16 fixed examples of 3 features, batches of 4, repeated."""

    def fn(params: Any = None) -> Any:
        x = (np.arange(48, dtype=np.float32).reshape(16, 3) % 7) / 7.0
        y = x @ np.asarray([[1.0], [-2.0], [0.5]], np.float32) + 0.25
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(BATCH)

    return fn


def model_fn(tf: Any, make_spec: Callable[..., Any], variant: str, records: list[Any]) -> Callable[..., Any]:
    """The program: ``make_spec(mode, loss=, train_op=, host_call=)`` builds TPUEstimatorSpec
    or NPUEstimatorSpec; host_fn appends ``(global step, loss)`` to ``records``."""

    def record(step: Any, loss: Any) -> Any:
        records.append((int(np.reshape(step, [-1])[0]), float(loss)))
        return np.int64(len(records))

    def host_fn(step: Any, loss: Any) -> Any:
        return tf.compat.v1.py_func(record, [step, loss], tf.int64, stateful=True)

    def fn(features: Any, labels: Any, mode: Any, params: Any = None) -> Any:
        w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.compat.v1.losses.mean_squared_error(labels, tf.matmul(features["x"], w))
        global_step = tf.compat.v1.train.get_global_step()
        step = global_step if variant == "var" else tf.reshape(global_step, [1])
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        train_op = opt.minimize(loss, global_step=global_step)
        return make_spec(mode, loss=loss, train_op=train_op, host_call=(host_fn, [step, loss]))

    return fn


def run_tf215(tf: Any, variant: str, model_dir: str) -> list[Any]:
    tpu = tf.compat.v1.estimator.tpu
    records: list[Any] = []
    config = tpu.RunConfig(model_dir=model_dir, tpu_config=tpu.TPUConfig(iterations_per_loop=1))
    est = tpu.TPUEstimator(
        model_fn(tf, tpu.TPUEstimatorSpec, variant, records),
        config=config,
        use_tpu=False,
        train_batch_size=BATCH,
    )
    est.train(input_fn(tf), steps=STEPS)
    return records


def main() -> None:
    import tensorflow as tf

    out: dict[str, Any] = {"tensorflow": tf.__version__, "steps": STEPS, "host_call": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in VARIANTS:
            out["host_call"][variant] = run_tf215(tf, variant, os.path.join(tmp, variant))
    with open(JSON_PATH, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
