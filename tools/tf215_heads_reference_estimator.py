"""TF 2.15 tf.estimator.Estimator runs of model_fns built on heads, for tools/tf215_heads_reference.py."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensorflow.core.protobuf import saved_model_pb2
from tf215_heads_reference_common import build_head, est, key_of, plain, signature, v1  # noqa: E402
from tf215_heads_reference_errors import head_spec  # noqa: E402

X8 = [
    [0.5, -1.0, 0.2],
    [1.0, 0.3, -0.7],
    [-0.2, 0.8, 1.1],
    [0.0, -0.5, 0.4],
    [1.5, 0.2, 0.0],
    [-1.0, -0.3, 0.6],
    [0.3, 0.9, -1.2],
    [0.7, -0.1, 0.5],
]
W8 = [[1.0], [0.5], [2.0], [0.0], [1.5], [1.0], [0.25], [3.0]]


def _w0(dim: int) -> list[list[float]]:
    return (np.arange(3 * dim, dtype=np.float32).reshape(3, dim) / 10.0 - 0.3).tolist()


def estimator_cases() -> list[dict[str, Any]]:
    def c(name, head, dim, labels, weights=False, optimizer=None):
        return {
            "name": name,
            "head": head,
            "w0": _w0(dim),
            "x": X8,
            "features": {"w": W8} if weights else {},
            "labels": labels,
            "learning_rate": 0.1,
            "train_steps": 3,
            "batch_size": 4,
            "optimizer": optimizer,
        }

    bin8 = [[0], [1], [1], [0], [1], [0], [0], [1]]
    cls8 = [[0], [2], [1], [0], [1], [2], [2], [0]]
    ml8 = [[1, 0, 1], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0], [1, 0, 1], [0, 1, 1], [1, 0, 0]]
    reg8 = [[0.5], [0.0], [1.5], [-1.0], [0.3], [2.0], [0.1], [-0.6]]
    return [
        c(
            "binary_vocab_weights_thresholds",
            head_spec("BinaryClassHead", weight_column="w", thresholds=[0.4], label_vocabulary=["no", "yes"]),
            1,
            [[["no", "yes"][v[0]]] for v in bin8],
            weights=True,
        ),
        c("binary_keras_sgd", head_spec("BinaryClassHead"), 1, bin8, optimizer="sgd"),
        c("multiclass", head_spec("MultiClassHead", n_classes=3), 3, cls8),
        c("regression_weights", head_spec("RegressionHead", weight_column="w"), 1, reg8, weights=True),
        c("multilabel", head_spec("MultiLabelHead", n_classes=3, thresholds=[0.5]), 3, ml8),
        c(
            "multihead",
            head_spec(
                "MultiHead",
                heads=[
                    head_spec("MultiClassHead", n_classes=3, name="m"),
                    head_spec("RegressionHead", name="r"),
                ],
            ),
            4,
            {"m": cls8, "r": reg8},
        ),
    ]


def _head_model_fn(features, labels, mode, params):
    case = params["case"]
    head = build_head(case["head"])
    w = v1.get_variable("w", initializer=tf.constant(np.asarray(case["w0"], np.float32)))
    logits = tf.matmul(features["x"], w)
    if case["optimizer"] == "sgd":
        opt = tf.keras.optimizers.legacy.SGD(case["learning_rate"])
        opt.iterations = v1.train.get_or_create_global_step()
        return head.create_estimator_spec(
            features=features, mode=mode, logits=logits, labels=labels, optimizer=opt, trainable_variables=[w]
        )

    def train_op_fn(loss):
        return v1.train.GradientDescentOptimizer(case["learning_rate"]).minimize(
            loss, global_step=v1.train.get_global_step()
        )

    return head.create_estimator_spec(
        features=features, mode=mode, logits=logits, labels=labels, train_op_fn=train_op_fn
    )


def _input_fn(case: dict[str, Any], repeat: bool):
    def input_fn():
        feats = {"x": np.asarray(case["x"], np.float32)}
        feats.update({k: np.asarray(v, np.float32) for k, v in case["features"].items()})
        labels = case["labels"]
        labels = (
            {k: np.asarray(v) for k, v in labels.items()} if isinstance(labels, dict) else np.asarray(labels)
        )
        ds = tf.data.Dataset.from_tensor_slices((feats, labels))
        if repeat:
            ds = ds.repeat()
        return ds.batch(case["batch_size"])

    return input_fn


def run_estimator(case: dict[str, Any], workdir: str) -> dict[str, Any]:
    model_dir = os.path.join(workdir, case["name"])
    losses: list[float] = []

    class Hook(v1.train.SessionRunHook):
        def before_run(self, run_context):
            loss = [t for t in v1.get_default_graph().get_collection("heads_loss")]
            return v1.train.SessionRunArgs(loss[0])

        def after_run(self, run_context, run_values):
            losses.append(float(run_values.results))

    def model_fn(features, labels, mode, params):
        spec = _head_model_fn(features, labels, mode, params)
        if mode == est.ModeKeys.TRAIN:
            v1.add_to_collection("heads_loss", spec.loss)
        return spec

    estimator = est.Estimator(model_fn, model_dir, params={"case": case})
    estimator.train(_input_fn(case, True), steps=case["train_steps"], hooks=[Hook()])
    evaluation = estimator.evaluate(_input_fn(case, False))
    predictions = [
        {key_of(k): plain(v) for k, v in sorted(p.items(), key=lambda i: key_of(i[0]))}
        for p in estimator.predict(_input_fn(case, False))
    ]
    receiver_fn = est.export.build_parsing_serving_input_receiver_fn(
        {"x": tf.io.FixedLenFeature([3], tf.float32)}
    )
    export_dir = estimator.export_saved_model(os.path.join(workdir, case["name"] + "_export"), receiver_fn)
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, b"saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    sigs = saved.meta_graphs[0].signature_def
    return {
        "train_losses": losses,
        "evaluate": {k: (int(v) if k == "global_step" else float(v)) for k, v in sorted(evaluation.items())},
        "predictions": predictions,
        "signature_defs": {k: signature(sigs[k]) for k in sorted(sigs)},
    }
