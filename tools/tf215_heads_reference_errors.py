"""Bad-input cases for tools/tf215_heads_reference.py: what TF 2.15's heads raise."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf215_heads_reference_common import (  # noqa: E402
    LABELS01,
    LABELS3,
    LOGITS1,
    LOGITS3,
    MULTILABEL,
    STATE,
    WEIGHTS,
    B,
    build_head,
    est,
    fed,
    labels_of,
    train_op_fn,
    v1,
)


def _error(name, head, call, inputs=None, mode="graph"):
    return {"name": name, "head": head, "call": call, "mode": mode, "inputs": inputs}


def head_spec(cls, **kwargs):
    return {"class": cls, "kwargs": kwargs}


def _inp(logits, labels, features=None):
    return {"logits": logits, "labels": labels, "features": features or {}, "regularization_losses": None}


def error_cases() -> list[dict[str, Any]]:
    binary, multi3, reg = (
        head_spec("BinaryClassHead"),
        head_spec("MultiClassHead", n_classes=3),
        head_spec("RegressionHead"),
    )
    mh = head_spec(
        "MultiHead",
        heads=[head_spec("MultiClassHead", n_classes=3, name="m"), head_spec("BinaryClassHead", name="b")],
    )
    out = [
        _error("binary_bad_loss_reduction", head_spec("BinaryClassHead", loss_reduction="mean"), "init"),
        _error("binary_none_loss_reduction", head_spec("BinaryClassHead", loss_reduction="none"), "init"),
        _error("binary_threshold_out_of_range", head_spec("BinaryClassHead", thresholds=[0.5, 1.0]), "init"),
        _error("binary_vocab_not_list", head_spec("BinaryClassHead", label_vocabulary="ab"), "init"),
        _error("multiclass_n_classes_2", head_spec("MultiClassHead", n_classes=2), "init"),
        _error(
            "multiclass_vocab_length",
            head_spec("MultiClassHead", n_classes=3, label_vocabulary=["a", "b"]),
            "init",
        ),
        _error("multilabel_n_classes_1", head_spec("MultiLabelHead", n_classes=1), "init"),
        _error(
            "multilabel_class_out_of_range",
            head_spec("MultiLabelHead", n_classes=3, classes_for_class_based_metrics=[3]),
            "init",
        ),
        _error(
            "multilabel_class_strings_no_vocab",
            head_spec("MultiLabelHead", n_classes=3, classes_for_class_based_metrics=["a"]),
            "init",
        ),
        _error("regression_label_dimension_0", head_spec("RegressionHead", label_dimension=0), "init"),
        _error("multihead_unnamed", head_spec("MultiHead", heads=[head_spec("BinaryClassHead")]), "init"),
        _error("multihead_no_heads", head_spec("MultiHead", heads=[]), "init"),
        _error(
            "multihead_weights_length",
            head_spec("MultiHead", heads=[head_spec("BinaryClassHead", name="b")], head_weights=[1.0, 2.0]),
            "init",
        ),
        _error("loss_fn_missing_logits", head_spec("RegressionHead", loss_fn="no_logits"), "init"),
    ]
    for mode in ("graph", "eager", "graph_unknown_batch"):
        out += [
            _error(
                "binary_logits_width_2",
                binary,
                "loss",
                _inp(LOGITS3[:4], LABELS01[:4]) | {"logits": [r[:2] for r in LOGITS3[:4]]},
                mode,
            ),
            _error("binary_logits_rank_1", binary, "loss", _inp([r[0] for r in LOGITS1], LABELS01), mode),
            _error("binary_labels_width_2", binary, "loss", _inp(LOGITS1, [[0, 1]] * B), mode),
            _error("binary_labels_batch_mismatch", binary, "loss", _inp(LOGITS1, LABELS01[:4]), mode),
            _error("binary_labels_none", binary, "loss", _inp(LOGITS1, None), mode),
            _error("binary_label_2", binary, "loss", _inp(LOGITS1, [[2]] + LABELS01[1:]), mode),
            _error(
                "binary_label_not_in_vocab",
                head_spec("BinaryClassHead", label_vocabulary=["neg", "pos"]),
                "loss",
                _inp(LOGITS1, [["neg"], ["maybe"]] + [["pos"]] * 4),
                mode,
            ),
            _error(
                "multiclass_float_labels",
                multi3,
                "loss",
                _inp(LOGITS3, [[0.0], [1.0], [2.0], [0.0], [1.0], [2.0]]),
                mode,
            ),
            _error("multiclass_label_3", multi3, "loss", _inp(LOGITS3, [[3]] + LABELS3[1:]), mode),
            _error("multiclass_label_negative", multi3, "loss", _inp(LOGITS3, [[-1]] + LABELS3[1:]), mode),
            _error(
                "multiclass_int_labels_with_vocab",
                head_spec("MultiClassHead", n_classes=3, label_vocabulary=["a", "b", "c"]),
                "loss",
                _inp(LOGITS3, LABELS3),
                mode,
            ),
            _error(
                "multiclass_logits_width_2", multi3, "predictions", _inp([r[:2] for r in LOGITS3], None), mode
            ),
            _error(
                "missing_weight_column",
                head_spec("MultiClassHead", n_classes=3, weight_column="w"),
                "loss",
                _inp(LOGITS3, LABELS3),
                mode,
            ),
            _error(
                "weights_wrong_shape",
                head_spec("BinaryClassHead", weight_column="w"),
                "loss",
                _inp(LOGITS1, LABELS01, {"w": WEIGHTS[:4]}),
                mode,
            ),
            _error(
                "weights_string",
                head_spec("BinaryClassHead", weight_column="w"),
                "loss",
                _inp(LOGITS1, LABELS01, {"w": [["a"]] * B}),
                mode,
            ),
            _error(
                "regression_labels_width_1_for_dim_2",
                head_spec("RegressionHead", label_dimension=2),
                "loss",
                _inp([r[:2] for r in LOGITS3], [[0.0]] * B),
                mode,
            ),
            _error(
                "multilabel_labels_not_indicator",
                head_spec("MultiLabelHead", n_classes=3),
                "loss",
                _inp(LOGITS3, [[2, 0, 1]] + MULTILABEL[1:]),
                mode,
            ),
            _error(
                "multilabel_labels_width_2",
                head_spec("MultiLabelHead", n_classes=3),
                "loss",
                _inp(LOGITS3, [r[:2] for r in MULTILABEL]),
                mode,
            ),
            _error(
                "logistic_regression_label_above_1",
                head_spec("LogisticRegressionHead"),
                "loss",
                _inp(LOGITS1, [[1.5]] + [[0.0]] * 5),
                mode,
            ),
            _error(
                "multihead_logits_do_not_split",
                mh,
                "loss",
                _inp(LOGITS3, {"m": LABELS3, "b": LABELS01}),
                mode,
            ),
            _error(
                "multihead_labels_not_dict",
                mh,
                "loss",
                _inp([a + b for a, b in zip(LOGITS3, LOGITS1, strict=True)], LABELS3),
                mode,
            ),
            _error(
                "multihead_labels_missing_head",
                mh,
                "loss",
                _inp([a + b for a, b in zip(LOGITS3, LOGITS1, strict=True)], {"m": LABELS3}),
                mode,
            ),
            _error("multihead_logits_dict_missing_head", mh, "predictions", _inp({"m": LOGITS3}, None), mode),
        ]
    out += [
        _error("train_no_optimizer_no_train_op_fn", binary, "train_spec", _inp(LOGITS1, LABELS01)),
        _error("train_update_ops_not_list", binary, "train_spec_update_ops", _inp(LOGITS1, LABELS01)),
        _error("train_optimizer_and_train_op_fn", binary, "train_spec_both", _inp(LOGITS1, LABELS01)),
        _error("train_optimizer_not_keras", binary, "train_spec_v1_optimizer", _inp(LOGITS1, LABELS01)),
        _error(
            "train_optimizer_no_trainable_variables",
            binary,
            "train_spec_no_variables",
            _inp(LOGITS1, LABELS01),
        ),
        _error("predictions_unknown_key", binary, "predictions_bad_key", _inp(LOGITS1, None)),
        _error("eval_labels_none", reg, "eval_spec", _inp(LOGITS1, None)),
        _error(
            "multihead_loss_reduction_differs",
            head_spec(
                "MultiHead",
                heads=[
                    head_spec("BinaryClassHead", name="b"),
                    head_spec("RegressionHead", name="r", loss_reduction="sum"),
                ],
            ),
            "loss_reduction",
        ),
    ]
    return out


def _logits_of(value):
    if isinstance(value, dict):
        return {k: fed(np.asarray(v, np.float32)) for k, v in value.items()}
    return fed(np.asarray(value, np.float32))


def _call(head: Any, call: str, inputs: dict[str, Any]) -> Any:
    """What the error case calls; returns tensors to run in graph mode."""
    features = {k: fed(v) for k, v in inputs["features"].items()}
    logits = _logits_of(inputs["logits"])
    labels = labels_of(inputs["labels"])
    if call == "loss":
        return head.loss(labels=labels, logits=logits, features=features)
    if call == "predictions":
        return head.predictions(logits)
    if call == "predictions_bad_key":
        return head.predictions(logits, keys=["logits", "scores"])
    if call == "eval_spec":
        return head.create_estimator_spec(features, est.ModeKeys.EVAL, logits, labels).loss
    train = dict(features=features, mode=est.ModeKeys.TRAIN, logits=logits, labels=labels)
    if call == "train_spec":
        return head.create_estimator_spec(**train).loss
    if call == "train_spec_update_ops":
        return head.create_estimator_spec(**train, train_op_fn=train_op_fn, update_ops=tf.no_op()).loss
    if call == "train_spec_both":
        opt = tf.keras.optimizers.legacy.SGD(0.1)
        return head.create_estimator_spec(**train, train_op_fn=train_op_fn, optimizer=opt).loss
    if call == "train_spec_v1_optimizer":
        opt = v1.train.GradientDescentOptimizer(0.1)
        return head.create_estimator_spec(**train, optimizer=opt, trainable_variables=[]).loss
    if call == "train_spec_no_variables":
        opt = tf.keras.optimizers.legacy.SGD(0.1)
        return head.create_estimator_spec(**train, optimizer=opt).loss
    raise KeyError(call)


def _message(exc: Exception) -> str:
    """The message without graph tracebacks and object addresses (stable across runs)."""
    lines = [
        line
        for line in str(exc).splitlines()
        if line.strip() and not line.startswith((" ", "\t", "Detected at node", "Graph execution error"))
    ]
    return re.sub(r" at 0x[0-9a-f]+", "", " ".join(" ".join(lines).split()))[:400]


def run_error(case: dict[str, Any]) -> dict[str, Any]:
    result = {"stage": "none", "error": None, "message": ""}

    def record(stage, exc):
        result.update(stage=stage, error=type(exc).__name__, message=_message(exc))

    if case["call"] == "init":
        try:
            if case["head"]["kwargs"].get("loss_fn") == "no_logits":
                est.RegressionHead(loss_fn=lambda labels, predictions: labels)
            else:
                build_head(case["head"])
        except Exception as exc:  # noqa: BLE001 - the type is what we record
            record("build", exc)
        return result
    if case["call"] == "loss_reduction":
        try:
            _ = build_head(case["head"]).loss_reduction
        except Exception as exc:  # noqa: BLE001
            record("build", exc)
        return result
    if case["mode"] == "eager":
        try:
            _call(build_head(case["head"]), case["call"], case["inputs"])
        except Exception as exc:  # noqa: BLE001
            record("build", exc)
        return result
    STATE["unknown_batch"] = case["mode"] == "graph_unknown_batch"
    with tf.Graph().as_default():
        try:
            fetch = _call(build_head(case["head"]), case["call"], case["inputs"])
        except Exception as exc:  # noqa: BLE001
            record("build", exc)
            return result
        with v1.Session() as sess:
            try:
                sess.run(v1.tables_initializer())
                sess.run(fetch)
            except Exception as exc:  # noqa: BLE001
                record("run", exc)
    STATE["unknown_batch"] = False
    return result
