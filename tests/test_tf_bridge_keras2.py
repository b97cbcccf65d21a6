"""TF1 model_fns with ``tf.compat.v1.layers`` (Keras 2 layers) on TensorFlow >= 2.16: a
clear error under Keras 3 saying what to do, and a real run once Keras 2 is chosen by the
user (``TF_USE_LEGACY_KERAS=1``, in a subprocess). tf_bridge never switches Keras itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

X = np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.25], [1.5, 1.0]], np.float32)
Y = np.array([[1.0], [0.0], [-1.0], [2.0]], np.float32)

MODEL_FN = """
import numpy as np
import tensorflow as tf
import tf_bridge

def model_fn(features, labels, mode):
    pred = tf.compat.v1.layers.dense(
        features["x"], 1, kernel_initializer=tf.compat.v1.constant_initializer([[0.5], [-0.5]]),
        bias_initializer=tf.compat.v1.zeros_initializer(), name="dense")
    loss = tf.reduce_mean(tf.square(pred - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return tf_bridge.EstimatorSpec(mode, loss=loss, train_op=train_op)
"""


def _input_fn() -> Any:
    return tf.data.Dataset.from_tensors(({"x": X}, Y))


def test_keras_3_error_says_what_to_do(tmp_path: Any) -> None:
    if os.environ.get("TF_USE_LEGACY_KERAS"):
        pytest.skip("this process runs Keras 2")
    namespace: dict[str, Any] = {}
    exec(MODEL_FN, namespace)
    est = tf_bridge.Estimator(namespace["model_fn"], str(tmp_path))
    with pytest.raises(AttributeError, match="TF_USE_LEGACY_KERAS=1 before TensorFlow is imported"):
        est.train(_input_fn, steps=1)
    assert "TF_USE_LEGACY_KERAS" not in os.environ  # nothing switched behind the user's back
    assert tf.keras.__version__.startswith("3.")


def test_with_keras_2_chosen_the_layers_train_as_by_hand(tmp_path: Any) -> None:
    code = MODEL_FN + textwrap.dedent(
        f"""
        import json, sys
        X = np.array({X.tolist()}, np.float32); Y = np.array({Y.tolist()}, np.float32)
        est = tf_bridge.Estimator(model_fn, sys.argv[1])
        est.train(lambda: tf.data.Dataset.from_tensors(({{"x": X}}, Y)), steps=1)
        print("RESULT", json.dumps({{"kernel": est.get_variable_value("dense/kernel").tolist(),
                                     "bias": est.get_variable_value("dense/bias").tolist()}}))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT, TF_USE_LEGACY_KERAS="1")
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    w, b = np.array([[0.5], [-0.5]], np.float32), np.zeros(1, np.float32)
    err = X @ w + b - Y  # d/dpred of mean((pred - y)^2) = 2 * err / n
    grad_w, grad_b = X.T @ (2 * err / len(X)), (2 * err / len(X)).sum(0)
    np.testing.assert_allclose(got["kernel"], w - 0.1 * grad_w, rtol=1e-6)
    np.testing.assert_allclose(got["bias"], b - 0.1 * grad_b, rtol=1e-6, atol=1e-7)
