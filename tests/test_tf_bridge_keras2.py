"""TF1 model_fns with ``tf.compat.v1.layers`` (Keras 2 layers) on TensorFlow >= 2.16: a
clear error under Keras 3 saying what to do, and a real run once Keras 2 is chosen:
``python -m tf_bridge`` sets ``TF_USE_LEGACY_KERAS=1`` when tf_keras is installed (issue
35, item 7), unless the user set it or passed ``--keras3``; ``import tf_bridge`` alone
never switches Keras."""

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


def test_the_launcher_chooses_keras_2_and_the_layers_train_as_by_hand(tmp_path: Any) -> None:
    script = tmp_path / "tf1_layers.py"
    script.write_text(
        MODEL_FN
        + textwrap.dedent(
            f"""
            import json, os, sys
            X = np.array({X.tolist()}, np.float32); Y = np.array({Y.tolist()}, np.float32)
            est = tf_bridge.Estimator(model_fn, sys.argv[1])
            est.train(lambda: tf.data.Dataset.from_tensors(({{"x": X}}, Y)), steps=1)
            print("RESULT", json.dumps({{"kernel": est.get_variable_value("dense/kernel").tolist(),
                                         "bias": est.get_variable_value("dense/bias").tolist(),
                                         "legacy": os.environ.get("TF_USE_LEGACY_KERAS")}}))
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_USE_LEGACY_KERAS", None)  # an unmodified TF 2.15 program, nothing set
    run = subprocess.run(
        [sys.executable, "-m", "tf_bridge", str(script), str(tmp_path / "m")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    said = [ln for ln in run.stderr.splitlines() if "TF_USE_LEGACY_KERAS" in ln]
    assert len(said) == 1 and "--keras3" in said[0], run.stderr
    got = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert got["legacy"] == "1"
    w, b = np.array([[0.5], [-0.5]], np.float32), np.zeros(1, np.float32)
    err = X @ w + b - Y  # d/dpred of mean((pred - y)^2) = 2 * err / n
    grad_w, grad_b = X.T @ (2 * err / len(X)), (2 * err / len(X)).sum(0)
    np.testing.assert_allclose(got["kernel"], w - 0.1 * grad_w, rtol=1e-6)
    np.testing.assert_allclose(got["bias"], b - 0.1 * grad_b, rtol=1e-6, atol=1e-7)


def test_keras3_and_the_users_own_setting_are_kept(monkeypatch: Any) -> None:
    from tf_bridge._keras_choice import LEGACY_KERAS, choose_keras

    monkeypatch.setenv(LEGACY_KERAS, "x")
    monkeypatch.delenv(LEGACY_KERAS)  # restored as unset afterwards
    assert choose_keras(keras3=True) is None and LEGACY_KERAS not in os.environ
    monkeypatch.setenv(LEGACY_KERAS, "0")
    assert choose_keras(keras3=False) is None and os.environ[LEGACY_KERAS] == "0"
    monkeypatch.delenv(LEGACY_KERAS)
    assert "tf_keras is installed" in choose_keras(keras3=False) and os.environ[LEGACY_KERAS] == "1"
