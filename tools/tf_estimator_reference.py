"""Reference signature defs written by TF 2.15's ``tf.estimator`` (run with TF 2.15 only).

jaxspec's export tests compare what ``tf_bridge`` writes with what
``tf.estimator.Estimator.export_saved_model`` / ``experimental_export_all_saved_models``
write for the same model_fn and receivers. TensorFlow >= 2.16 has no ``tf.estimator``,
so this script runs in a separate virtual environment (``tools/tf_estimator_reference.sh``
makes it and runs this) and writes ``tests/data/tf_estimator_reference.json``; CI only
reads that file.

The two models mirror ``tests/test_export_support.py``'s linear regressor and examples/digits.py:

* ``linear``: ``y = x @ w + b`` on ``x`` float32 ``[batch, 3]``; PREDICT heads
  ``serving_default`` (RegressionOutput) and ``predict`` (PredictOutput); TRAIN mean
  squared error + SGD; EVAL loss, predictions and the ``mae``/``rmse`` metrics.
* ``digits``: the examples/digits.py MLP (64 → 128 → 64 → 10) as a TPUEstimatorSpec
  model_fn run by ``TPUEstimator(use_tpu=False)``; PREDICT heads ``serving_default``
  (PredictOutput of class_ids/probabilities) and ``classification``; EVAL metrics
  ``accuracy`` and ``mean_max_probability`` through ``eval_metrics``.

Usage: ``python tools/tf_estimator_reference.py [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

CLASS_NAMES = [str(i) for i in range(10)]


def _linear_model_fn(features, labels, mode, params):
    x = features["x"]
    w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    predictions = {"predictions": y}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(
            mode,
            predictions=predictions,
            export_outputs={
                "serving_default": tf.estimator.export.RegressionOutput(y),
                "predict": tf.estimator.export.PredictOutput(predictions),
            },
        )
    loss = tf.reduce_mean(tf.square(y - labels))
    if mode == tf.estimator.ModeKeys.TRAIN:
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return tf.estimator.EstimatorSpec(
        mode,
        loss=loss,
        predictions=predictions,
        eval_metric_ops={
            "mae": tf.compat.v1.metrics.mean_absolute_error(labels, y),
            "rmse": tf.compat.v1.metrics.root_mean_squared_error(labels, y),
        },
    )


def _digits_model_fn(features, labels, mode, params):
    x = features["x"]
    h = tf.compat.v1.layers.dense(x, 128, activation=tf.nn.relu)
    h = tf.compat.v1.layers.dense(h, 64, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(h, 10)
    spec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
    if mode == tf.estimator.ModeKeys.TRAIN:
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        opt = tf.compat.v1.train.AdamOptimizer(1e-2)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return spec(mode, loss=loss, train_op=train_op)
    if mode == tf.estimator.ModeKeys.EVAL:
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)

        def metric_fn(labels, logits):
            return {
                "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, axis=-1)),
                "mean_max_probability": tf.compat.v1.metrics.mean(
                    tf.reduce_max(tf.nn.softmax(logits), axis=-1)
                ),
            }

        return spec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    probabilities = tf.nn.softmax(logits)
    class_ids = tf.argmax(logits, axis=-1)
    classes = tf.tile(tf.constant([CLASS_NAMES]), [tf.shape(x)[0], 1])
    return spec(
        mode,
        predictions={"class_ids": class_ids, "probabilities": probabilities},
        export_outputs={
            "serving_default": tf.estimator.export.PredictOutput(
                {"class_ids": class_ids, "probabilities": probabilities}
            ),
            "classification": tf.estimator.export.ClassificationOutput(scores=probabilities, classes=classes),
        },
    )


def _input_fn(num_features, label_dtype):
    def input_fn():
        rs = np.random.RandomState(0)
        x = rs.rand(32, num_features).astype(np.float32)
        y = (
            rs.randint(0, 10, size=(32,)).astype(label_dtype)
            if label_dtype == np.int32
            else rs.rand(32, 1).astype(np.float32)
        )
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(8)

    return input_fn


def _tensor_info(info) -> dict:
    shape = None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
    return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": shape, "name": info.name}


def _describe(export_dir: bytes) -> dict:
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir.decode(), "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graphs = {}
    for meta in proto.meta_graphs:
        tags = ",".join(sorted(meta.meta_info_def.tags))
        graphs[tags] = {
            "signatures": {
                key: {
                    "method_name": sig.method_name,
                    "inputs": {k: _tensor_info(v) for k, v in sorted(sig.inputs.items())},
                    "outputs": {k: _tensor_info(v) for k, v in sorted(sig.outputs.items())},
                }
                for key, sig in sorted(meta.signature_def.items())
            },
            "collections": sorted(k for k in meta.collection_def if k.startswith("saved_model")),
        }
    return graphs


def _export(make_estimator, input_fn, num_features, raw_receiver=False) -> dict:
    model_dir = tempfile.mkdtemp()
    est = make_estimator(model_dir)
    est.train(input_fn, steps=2)
    base = os.path.join(model_dir, "export")
    if raw_receiver:
        serving = tf.estimator.export.build_raw_serving_input_receiver_fn(
            {"x": tf.zeros([1, num_features], tf.float32)}
        )
    else:
        serving = tf.estimator.export.build_parsing_serving_input_receiver_fn(
            {"x": tf.io.FixedLenFeature([num_features], tf.float32)}
        )
    # Not in tf.estimator's public API, but what TF's own tests use for TRAIN/EVAL exports.
    from tensorflow_estimator.python.estimator.export import export as tf_export

    supervised = tf_export.build_supervised_input_receiver_fn_from_input_fn(input_fn)
    out = {"predict": _describe(est.export_saved_model(base, serving))}
    out["all"] = _describe(
        est.experimental_export_all_saved_models(
            base,
            {
                tf.estimator.ModeKeys.TRAIN: supervised,
                tf.estimator.ModeKeys.EVAL: supervised,
                tf.estimator.ModeKeys.PREDICT: serving,
            },
        )
    )
    return out


def main(out_path: str) -> None:
    linear_input = _input_fn(3, np.float32)
    digits_input = _input_fn(64, np.int32)

    def linear(model_dir):
        return tf.estimator.Estimator(_linear_model_fn, model_dir=model_dir)

    def digits(model_dir, export_to_tpu=False):
        config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=model_dir)
        return tf.compat.v1.estimator.tpu.TPUEstimator(
            model_fn=_digits_model_fn,
            config=config,
            use_tpu=False,
            train_batch_size=8,
            eval_batch_size=8,
            predict_batch_size=8,
            export_to_tpu=export_to_tpu,
        )

    reference = {
        "tensorflow": tf.__version__,
        "linear": _export(linear, linear_input, 3),
        "linear_raw": {"predict": _export(linear, linear_input, 3, raw_receiver=True)["predict"]},
        "digits": _export(digits, lambda params=None: digits_input(), 64),
    }
    with open(out_path, "w") as f:
        json.dump(reference, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "tf_estimator_reference.json")
    parser.add_argument("--out", default=os.path.normpath(default))
    main(parser.parse_args().out)
