"""The models and data behind tf_bridge's TF 2.15 reference numbers.

Imported twice, unchanged: by ``tools/tf215_reference.py`` under TensorFlow 2.15 with
the real ``tf.estimator`` (``api = tf215_api()``), and by ``tests/test_tf_runner*.py``
under the pinned TensorFlow with ``api = tf_bridge``. Only TensorFlow and numpy are
imported here, so the same model_fn code runs in both worlds.

``api`` must provide EstimatorSpec, TPUEstimatorSpec, ModeKeys, PredictOutput,
RegressionOutput and ServingInputReceiver.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import tensorflow as tf

TRAIN_BATCH = 4
EVAL_BATCH = 4
PREDICT_BATCH = 3
W0 = [[0.1], [-0.2], [0.3]]
B0 = [0.05]
LEARNING_RATE = 0.1


def tf215_api() -> Any:
    """The tf.estimator names (TensorFlow <= 2.15 with tensorflow-estimator)."""
    return types.SimpleNamespace(
        EstimatorSpec=tf.estimator.EstimatorSpec,
        TPUEstimatorSpec=tf.compat.v1.estimator.tpu.TPUEstimatorSpec,
        ModeKeys=tf.estimator.ModeKeys,
        PredictOutput=tf.estimator.export.PredictOutput,
        RegressionOutput=tf.estimator.export.RegressionOutput,
        ServingInputReceiver=tf.estimator.export.ServingInputReceiver,
    )


def _features(n: int, offset: int) -> np.ndarray:
    i = np.arange(offset, offset + n, dtype=np.float32)[:, None]
    j = np.arange(3, dtype=np.float32)[None, :]
    return (np.mod(i * 7.0 + j * 3.0, 11.0) / 5.0 - 1.0).astype(np.float32)


def _labels(x: np.ndarray, offset: int) -> np.ndarray:
    noise = (np.mod(np.arange(offset, offset + len(x)), 3) - 1.0) * 0.05
    y = x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.3 + noise[:, None]
    return y.astype(np.float32)


def train_data() -> tuple[np.ndarray, np.ndarray]:
    """24 examples: x float32 [24, 3], y float32 [24, 1]."""
    x = _features(24, 0)
    return x, _labels(x, 0)


def eval_data() -> tuple[np.ndarray, np.ndarray]:
    """10 examples (batches of 4, 4 and 2)."""
    x = _features(10, 100)
    return x, _labels(x, 100)


def predict_data() -> np.ndarray:
    """7 examples (batches of 3, 3 and 1)."""
    return _features(7, 200)


def train_input_fn(params: dict[str, Any] | None = None) -> Any:
    """Repeating batches (params['batch_size'] when given, as TPUEstimator passes it)."""
    x, y = train_data()
    batch = (params or {}).get("batch_size", TRAIN_BATCH)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(batch)


def eval_input_fn(params: dict[str, Any] | None = None) -> Any:
    """One pass over eval_data, the last batch short."""
    x, y = eval_data()
    batch = (params or {}).get("batch_size", EVAL_BATCH)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(batch)


def predict_input_fn(params: dict[str, Any] | None = None) -> Any:
    """One pass over predict_data, features only."""
    batch = (params or {}).get("batch_size", PREDICT_BATCH)
    return tf.data.Dataset.from_tensor_slices({"x": predict_data()}).batch(batch)


def serving_input_receiver_fn(api: Any) -> Any:
    """A raw receiver: one float32 placeholder ``x`` [batch, 3]."""

    def fn() -> Any:
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        return api.ServingInputReceiver({"x": x}, {"x": x})

    return fn


class LossRecorder(tf.compat.v1.train.SessionRunHook):
    """Appends the loss of every run it sees to ``sink``."""

    def __init__(self, loss: Any, sink: list[float]) -> None:
        self._loss = loss
        self._sink = sink

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._sink.append(float(run_values.results))


def linear(features: Any) -> Any:
    """pred = x @ w + b, float32 [batch, 1], with fixed initial values."""
    w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.constant_initializer(W0))
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.constant_initializer(B0))
    return tf.matmul(features["x"], w) + b


def make_linear_model_fn(api: Any, losses: list[float]) -> Any:
    """An EstimatorSpec model_fn: linear regression, MSE, Adam, mae/rmse metrics; every
    training step's loss goes to ``losses``."""

    def model_fn(features: Any, labels: Any, mode: str, params: Any) -> Any:
        pred = linear(features)
        if mode == api.ModeKeys.PREDICT:
            outputs = {
                "serving_default": api.RegressionOutput(tf.squeeze(pred, 1)),
                "all": api.PredictOutput({"pred": pred}),
            }
            return api.EstimatorSpec(mode, predictions={"pred": tf.squeeze(pred, 1)}, export_outputs=outputs)
        loss = tf.compat.v1.losses.mean_squared_error(labels, pred)
        train_op = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step()
        )
        metrics = {
            "mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred),
            "rmse": tf.compat.v1.metrics.root_mean_squared_error(labels, pred),
        }
        return api.EstimatorSpec(
            mode,
            loss=loss,
            train_op=train_op,
            eval_metric_ops=metrics,
            training_hooks=[LossRecorder(loss, losses)],
        )

    return model_fn


def make_tpu_model_fn(api: Any, records: dict[str, list[Any]]) -> Any:
    """A TPUEstimatorSpec model_fn (the linear model) with host_call in TRAIN and EVAL and
    eval_metrics; host_fn records each step's loss, mean prediction and mode through a
    ``py_func`` (it runs on the host at every step); params' batch sizes are recorded."""

    def record(mode: bytes, loss: np.ndarray, pred_mean: np.ndarray) -> np.int64:
        records["host_call"].append((mode.decode(), float(loss[0]), float(pred_mean[0])))
        return np.int64(len(records["host_call"]))

    def host_fn(mode: Any, loss: Any, pred_mean: Any) -> Any:
        return tf.compat.v1.py_func(record, [mode, loss, pred_mean], tf.int64, stateful=True)

    def metric_fn(labels: Any, pred: Any) -> Any:
        return {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred)}

    def model_fn(features: Any, labels: Any, mode: str, params: Any) -> Any:
        records["model_fn_params"].append((mode, params.get("batch_size"), params.get("use_tpu")))
        pred = linear(features)
        if mode == api.ModeKeys.PREDICT:
            return api.TPUEstimatorSpec(mode, predictions={"pred": tf.squeeze(pred, 1)})
        loss = tf.compat.v1.losses.mean_squared_error(labels, pred)
        host_call = (
            host_fn,
            [tf.constant(mode), tf.reshape(loss, [1]), tf.reshape(tf.reduce_mean(pred), [1])],
        )
        if mode == api.ModeKeys.EVAL:
            return api.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(metric_fn, [labels, pred]), host_call=host_call
            )
        train_op = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step()
        )
        return api.TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)

    return model_fn


def recording_input_fn(input_fn: Any, records: dict[str, list[Any]]) -> Any:
    """``input_fn`` that first records the params['batch_size'] it was given."""

    def wrapped(params: dict[str, Any]) -> Any:
        records["input_fn_batch_size"].append(params.get("batch_size"))
        return input_fn(params)

    return wrapped


def signature_summary(meta_graph_def: Any) -> dict[str, Any]:
    """Signature defs as plain data: method name, and per input/output its tensor name,
    dtype and shape (-1 for unknown dims)."""

    def tensors(infos: Any) -> dict[str, Any]:
        return {
            key: [info.name, tf.dtypes.as_dtype(info.dtype).name, [d.size for d in info.tensor_shape.dim]]
            for key, info in sorted(infos.items())
        }

    return {
        key: {"method_name": sig.method_name, "inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs)}
        for key, sig in sorted(meta_graph_def.signature_def.items())
    }
