"""tf_bridge's predict keeps its graph, session and restored variables between calls while
the checkpoint is unchanged; the predictions equal the per-call path's and numpy's."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

import tf_bridge

X = np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.25]], np.float32)
Y = X @ np.array([[1.0], [-1.0]], np.float32)


def _model_fn(calls: list[str], prediction_hook: bool = False) -> Any:
    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        calls.append(mode)
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5], [-0.25]]))
        pred = tf.matmul(features["x"], w)[:, 0]
        if mode == tf_bridge.ModeKeys.PREDICT:
            hooks = [tf.compat.v1.train.SessionRunHook()] if prediction_hook else []
            return tf_bridge.EstimatorSpec(
                mode, predictions={"y": pred, "twice": 2 * pred}, prediction_hooks=hooks
            )
        loss = tf.reduce_mean(tf.square(pred - labels[:, 0]))
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        return tf_bridge.EstimatorSpec(
            mode, loss=loss, train_op=opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        )

    return model_fn


def _train_input_fn() -> Any:
    return tf.data.Dataset.from_tensors(({"x": X}, Y)).repeat(2)


def _predict_input_fn() -> Any:
    return tf.data.Dataset.from_tensor_slices({"x": X}).batch(2)


def _by_hand(est: Any) -> np.ndarray:
    return (X @ est.get_variable_value("w"))[:, 0]


def test_predict_builds_once_and_picks_up_a_new_checkpoint(tmp_path: Any) -> None:
    calls: list[str] = []
    est = tf_bridge.Estimator(_model_fn(calls), str(tmp_path))
    est.train(_train_input_fn)
    first = [p["y"] for p in est.predict(_predict_input_fn)]
    second = [p["y"] for p in est.predict(_predict_input_fn)]
    np.testing.assert_allclose(first, _by_hand(est), rtol=1e-6)
    np.testing.assert_array_equal(first, second)
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 1
    # the per-call path (hooks given) gives the same values
    hooked = [p["y"] for p in est.predict(_predict_input_fn, hooks=[tf.compat.v1.train.SessionRunHook()])]
    np.testing.assert_array_equal(first, hooked)
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 2
    # a new checkpoint: rebuilt once, new weights
    est.train(_train_input_fn)
    after = [p["y"] for p in est.predict(_predict_input_fn)]
    np.testing.assert_allclose(after, _by_hand(est), rtol=1e-6)
    assert not np.allclose(after, first)
    list(est.predict(_predict_input_fn))
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 3
    # other predict_keys: another graph; whole batches as TF gives them
    batches = list(est.predict(_predict_input_fn, predict_keys=["twice"], yield_single_examples=False))
    assert [sorted(b) for b in batches] == [["twice"], ["twice"]] and [len(b["twice"]) for b in batches] == [
        2,
        1,
    ]
    np.testing.assert_allclose(np.concatenate([b["twice"] for b in batches]), 2 * _by_hand(est), rtol=1e-6)
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 4


def test_prediction_hooks_keep_the_per_call_path(tmp_path: Any) -> None:
    calls: list[str] = []
    est = tf_bridge.Estimator(_model_fn(calls, prediction_hook=True), str(tmp_path))
    est.train(_train_input_fn)
    for _ in range(2):
        np.testing.assert_allclose([p["y"] for p in est.predict(_predict_input_fn)], _by_hand(est), rtol=1e-6)
    # the first call builds once on placeholders, sees the hook, then runs per call
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 3


def test_a_one_element_dataset_is_read_whole_with_or_without_labels(tmp_path: Any) -> None:
    calls: list[str] = []
    est = tf_bridge.Estimator(_model_fn(calls), str(tmp_path))
    est.train(_train_input_fn)
    inputs = {
        "features": lambda: tf.data.Dataset.from_tensors({"x": X}),
        "features and labels": lambda: tf.data.Dataset.from_tensors(({"x": X}, Y)),
        "a filtered one (cardinality unknown)": lambda: tf.data.Dataset.from_tensors({"x": X}).filter(
            lambda f: True
        ),
    }
    for what, input_fn in inputs.items():
        assert what and len(list(est.predict(input_fn))) == len(X)
        np.testing.assert_allclose([p["y"] for p in est.predict(input_fn)], _by_hand(est), rtol=1e-6)
    assert calls.count(tf_bridge.ModeKeys.PREDICT) == 1  # one graph for all three
