"""Reference numbers for the heads, from TensorFlow 2.15's real tf.estimator heads.

Run in a TF 2.15 virtual environment (CI never runs it; TF 2.15 is no dependency)::

    /tmp/tf215venv/bin/python tools/tf215_heads_reference.py      (or tools/tf215_heads_reference.sh)

The bad-input cases are in ``tf215_heads_reference_errors.py``, the Estimator runs in
``tf215_heads_reference_estimator.py``, the shared helpers and data in
``tf215_heads_reference_common.py``. It writes ``tests/data/tf215_heads.json``, read by
``tests/test_tf_heads*.py`` (tf_bridge's heads) and by the JAX-side heads' tests. Layout::

    {
      "tensorflow": "2.15.x", "tensorflow_estimator": "2.15.x",
      "loss_fns": {name: description},        # named loss_fn / inverse_link_fn (LOSS_FNS)
      "cases": [                               # one head on one batch, in graph mode
        {
          "name": str,
          "head": HEAD,                        # see below
          "inputs": {
            "logits": [[float]] ([batch, logits_dimension]),
            "labels": nested list (numbers or str) or {head name: labels} for a MultiHead,
            "features": {name: [[float]]},     # the weight column(s), [batch, 1]
            "regularization_losses": [float] or null
          },
          "loss": float,                       # head.loss(...) (regularization included)
          "eval": {"loss": float, "metrics": {key: float}},   # EVAL spec: loss and every
                                               # eval_metric_ops value after one update
          "train": {"loss": float},            # TRAIN spec with a train_op_fn
          "predictions": {key: nested list},   # PREDICT spec's predictions; a MultiHead's
                                               # tuple keys (head, key) as "head/key"
          "export_outputs": {key: "ClassificationOutput"|"RegressionOutput"|"PredictOutput"},
          "predict_output_keys": {key: [str]}, # the PredictOutput heads' output names
          "signature_defs": {receiver: {key: SIGNATURE}}
                                               # receiver "raw": {"logits": float32
                                               # [None, d]}; "example": one string tensor
                                               # "inputs" [None] (serialized tf.Examples
                                               # holding "logits")
        }, ...
      ],
      "more_cases": [...],                     # as "cases": rank-3 logits, per-logit and
                                               # numeric_column weights, 'auto', SparseTensor
                                               # labels {"__sparse__": {"indices", "values",
                                               # "dense_shape"}}; a weight_column may be
                                               # {"numeric_column": key, "normalizer":
                                               # "double" (w -> 2 w) or absent}
      "errors": [                              # bad input, TF 2.15's exception types
        {"name": str, "head": HEAD, "call": "init"|"loss"|"predictions"|"eval_spec"|
         "train_spec*"|"loss_reduction", "mode": "graph"|"eager"|"graph_unknown_batch"
         (inputs of static shape, eager tensors, or batch dimension None), "inputs": {...} or null,
         "stage": "build"|"run"|"none",       # raised while building the graph / when the
                                               # graph ran (graph mode); "none": no error
         "error": exception class name or null, "message": str}
      ],
      "estimator": [                           # through tf.estimator.Estimator
        {"name": str, "head": HEAD, "w0": [[float]] (logits = features["x"] @ w0 + w),
         "x": [[float]] (8 x 3), "features": {name: [[float]]}, "labels": ...,
         "learning_rate": 0.1, "train_steps": 3, "batch_size": 4,
         "train_losses": [float], "evaluate": {key: float or int},
         "predictions": [{key: value}] (one per example),
         "signature_defs": {key: SIGNATURE}}   # of the SavedModel export_saved_model wrote,
                                               # with a parsing receiver for "x" (and weights)
      ]
    }
    HEAD = {"class": "BinaryClassHead"|..., "kwargs": {arg: value}} where a loss_fn or
           inverse_link_fn is a name from "loss_fns", and a MultiHead's kwargs are
           {"heads": [HEAD], "head_weights": [float] or absent}
    SIGNATURE = {"method_name": str, "inputs": {key: [dtype, shape]}, "outputs": {key: [dtype, shape]}}
           (dtype a DataType name such as "DT_FLOAT", shape with -1 for an unknown size)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_estimator as tfe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf215_heads_reference_common import (  # noqa: E402
    COUNTS,
    LABELS01,
    LABELS3,
    LOGITS1,
    LOGITS3,
    LOSS_FNS,
    MULTILABEL,
    OUT,
    REG_LABELS2,
    WEIGHTS,
    build_head,
    est,
    fed,
    key_of,
    labels_of,
    metric_values,
    plain,
    signature_defs,
    train_op_fn,
    v1,
)
from tf215_heads_reference_errors import error_cases, run_error  # noqa: E402
from tf215_heads_reference_estimator import estimator_cases, run_estimator  # noqa: E402


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    inputs = case["inputs"]
    logits_value = np.asarray(inputs["logits"], np.float32)
    result: dict[str, Any] = {}
    with tf.Graph().as_default():
        head = build_head(case["head"])
        features = {k: fed(v) for k, v in inputs["features"].items()}
        reg = inputs.get("regularization_losses")
        reg_t = [tf.constant(r, tf.float32) for r in reg] if reg is not None else None
        logits = fed(logits_value)
        labels = labels_of(inputs["labels"])
        loss = head.loss(labels=labels, logits=logits, features=features, regularization_losses=reg_t)
        eval_spec = head.create_estimator_spec(
            features=features,
            mode=est.ModeKeys.EVAL,
            logits=logits,
            labels=labels,
            regularization_losses=reg_t,
        )
        train_spec = head.create_estimator_spec(
            features=features,
            mode=est.ModeKeys.TRAIN,
            logits=logits,
            labels=labels,
            train_op_fn=train_op_fn,
            regularization_losses=reg_t,
        )
        with v1.Session() as sess:
            sess.run(v1.tables_initializer())
            result["loss"] = float(sess.run(loss))
            result["train"] = {"loss": float(sess.run(train_spec.loss))}
            result["eval"] = {
                "loss": float(sess.run(eval_spec.loss)),
                "metrics": metric_values(sess, eval_spec.eval_metric_ops),
            }
    # PREDICT: logits are the serving input (raw), or parsed from serialized tf.Examples.
    inner = list(logits_value.shape[1:])
    with tf.Graph().as_default():
        head = build_head(case["head"])
        ph = v1.placeholder(tf.float32, [None] + inner, name="logits")
        spec = head.create_estimator_spec(features={}, mode=est.ModeKeys.PREDICT, logits=ph)
        with v1.Session() as sess:
            sess.run(v1.tables_initializer())
            preds = sess.run(spec.predictions, {ph: logits_value})
        result["predictions"] = {
            key_of(k): plain(v) for k, v in sorted(preds.items(), key=lambda i: key_of(i[0]))
        }
        result["export_outputs"] = {k: type(v).__name__ for k, v in sorted(spec.export_outputs.items())}
        result["predict_output_keys"] = {
            k: sorted(v.outputs) for k, v in sorted(spec.export_outputs.items()) if hasattr(v, "outputs")
        }
        result["signature_defs"] = {"raw": signature_defs(spec.export_outputs, {"logits": ph})}
    with tf.Graph().as_default():
        head = build_head(case["head"])
        serialized = v1.placeholder(tf.string, [None], name="input_example_tensor")
        parsed = tf.io.parse_example(serialized, {"logits": tf.io.FixedLenFeature(inner, tf.float32)})
        spec = head.create_estimator_spec(features={}, mode=est.ModeKeys.PREDICT, logits=parsed["logits"])
        result["signature_defs"]["example"] = signature_defs(spec.export_outputs, {"inputs": serialized})
    return result


def _case(name, cls, kwargs, logits, labels, features=None, reg=None):
    return {
        "name": name,
        "head": {"class": cls, "kwargs": kwargs},
        "inputs": {
            "logits": logits,
            "labels": labels,
            "features": features or {},
            "regularization_losses": reg,
        },
    }


def cases() -> list[dict[str, Any]]:
    vocab2 = [["neg", "pos"][i[0]] for i in LABELS01]
    vocab3 = [[["a", "b", "c"][i[0]]] for i in LABELS3]
    w = {"w": WEIGHTS}
    multi = {
        "class": "MultiHead",
        "kwargs": {
            "heads": [
                {"class": "MultiClassHead", "kwargs": {"n_classes": 3, "name": "m"}},
                {"class": "BinaryClassHead", "kwargs": {"name": "b", "thresholds": [0.4]}},
            ],
            "head_weights": [1.0, 2.0],
        },
    }
    multi2 = {
        "class": "MultiHead",
        "kwargs": {
            "heads": [
                {"class": "RegressionHead", "kwargs": {"label_dimension": 2, "name": "r"}},
                {"class": "MultiLabelHead", "kwargs": {"n_classes": 3, "name": "ml", "weight_column": "w"}},
            ],
        },
    }
    out = [
        _case("binary_default", "BinaryClassHead", {}, LOGITS1, LABELS01),
        _case("binary_rank1_labels", "BinaryClassHead", {}, LOGITS1, [v[0] for v in LABELS01]),
        _case(
            "binary_weights_thresholds_vocab_sum",
            "BinaryClassHead",
            {
                "weight_column": "w",
                "thresholds": [0.3, 0.7],
                "label_vocabulary": ["neg", "pos"],
                "loss_reduction": "sum",
            },
            LOGITS1,
            [[v] for v in vocab2],
            w,
        ),
        _case(
            "binary_named_regularized", "BinaryClassHead", {"name": "bin"}, LOGITS1, LABELS01, reg=[0.25, 0.5]
        ),
        _case(
            "binary_loss_fn_features",
            "BinaryClassHead",
            {"loss_fn": "weighted_sigmoid"},
            LOGITS1,
            LABELS01,
            w,
        ),
        _case("multiclass_default", "MultiClassHead", {"n_classes": 3}, LOGITS3, LABELS3),
        _case(
            "multiclass_vocab_weights_sum",
            "MultiClassHead",
            {
                "n_classes": 3,
                "label_vocabulary": ["a", "b", "c"],
                "weight_column": "w",
                "loss_reduction": "sum",
            },
            LOGITS3,
            vocab3,
            w,
        ),
        _case(
            "multiclass_named_regularized",
            "MultiClassHead",
            {"n_classes": 3, "name": "mc"},
            LOGITS3,
            LABELS3,
            reg=[0.3],
        ),
        _case(
            "regression_default", "RegressionHead", {}, LOGITS1, [[0.5], [0.0], [1.5], [-1.0], [0.3], [2.0]]
        ),
        _case(
            "regression_dim2_weights_sum",
            "RegressionHead",
            {"label_dimension": 2, "weight_column": "w", "loss_reduction": "sum", "name": "reg"},
            [r[:2] for r in LOGITS3],
            REG_LABELS2,
            w,
        ),
        _case(
            "regression_loss_fn_inverse_link",
            "RegressionHead",
            {"loss_fn": "abs_error", "inverse_link_fn": "exp"},
            LOGITS1,
            [[0.5], [0.0], [1.5], [-1.0], [0.3], [2.0]],
        ),
        _case("poisson", "PoissonRegressionHead", {}, LOGITS1, COUNTS),
        _case(
            "poisson_no_full_loss_weights",
            "PoissonRegressionHead",
            {"compute_full_loss": False, "weight_column": "w"},
            LOGITS1,
            COUNTS,
            w,
        ),
        _case(
            "logistic_regression",
            "LogisticRegressionHead",
            {},
            LOGITS1,
            [[0.0], [1.0], [0.25], [1.0], [0.5], [0.0]],
        ),
        _case("multilabel_default", "MultiLabelHead", {"n_classes": 3}, LOGITS3, MULTILABEL),
        _case(
            "multilabel_thresholds_classes_vocab_weights",
            "MultiLabelHead",
            {
                "n_classes": 3,
                "weight_column": "w",
                "thresholds": [0.5, 0.6],
                "label_vocabulary": ["a", "b", "c"],
                "classes_for_class_based_metrics": ["a", "c"],
                "loss_reduction": "sum",
                "name": "tags",
            },
            LOGITS3,
            MULTILABEL,
            w,
        ),
        _case(
            "multilabel_class_ids",
            "MultiLabelHead",
            {"n_classes": 3, "classes_for_class_based_metrics": [1, 2]},
            LOGITS3,
            MULTILABEL,
            reg=[0.1],
        ),
    ]
    out.append(
        {
            "name": "multihead_multiclass_binary_weighted",
            "head": multi,
            "inputs": {
                "logits": [a + b for a, b in zip(LOGITS3, LOGITS1, strict=True)],
                "labels": {"m": LABELS3, "b": LABELS01},
                "features": {},
                "regularization_losses": [0.2],
            },
        }
    )
    out.append(
        {
            "name": "multihead_regression_multilabel",
            "head": multi2,
            "inputs": {
                "logits": [a[:2] + b for a, b in zip(LOGITS3, LOGITS3[::-1], strict=True)],
                "labels": {"r": REG_LABELS2, "ml": MULTILABEL},
                "features": w,
                "regularization_losses": None,
            },
        }
    )
    return out


def run_eager(case: dict[str, Any]) -> dict[str, Any]:
    """head.loss and head.predictions outside any graph (TF 2.15 allowed both eagerly)."""
    inputs = case["inputs"]
    head = build_head(case["head"])
    features = {k: fed(v) for k, v in inputs["features"].items()}
    reg = inputs.get("regularization_losses")
    reg_t = [tf.constant(r, tf.float32) for r in reg] if reg is not None else None
    logits = tf.constant(np.asarray(inputs["logits"], np.float32))
    loss = head.loss(
        labels=labels_of(inputs["labels"]), logits=logits, features=features, regularization_losses=reg_t
    )
    preds = head.predictions(logits)
    return {
        "loss": float(loss.numpy()),
        "predictions": {
            key_of(k): plain(v.numpy()) for k, v in sorted(preds.items(), key=lambda i: key_of(i[0]))
        },
    }


def _sparse(indicator: list[list[int]], vocab: list[str] | None = None) -> dict[str, Any]:
    """Each row's positive classes (ids, or names with vocab), left-aligned, [batch, n]."""
    indices, values = [], []
    for r, row in enumerate(indicator):
        for j, c in enumerate(i for i, v in enumerate(row) if v):
            indices.append([r, j])
            values.append(vocab[c] if vocab else c)
    return {
        "__sparse__": {
            "indices": indices,
            "values": values,
            "dense_shape": [len(indicator), len(indicator[0])],
        }
    }


def more_cases() -> list[dict[str, Any]]:
    """Rank-3 logits, per-logit weights, numeric_column weights, 'auto', sparse labels."""
    logits3d = np.asarray(LOGITS3, np.float32).reshape(2, 3, 3).tolist()
    labels3d = np.asarray(LABELS3).reshape(2, 3).tolist()  # one rank below logits
    weights3d = np.asarray(WEIGHTS).reshape(2, 3).tolist()
    vocab = ["a", "b", "c"]
    return [
        _case(
            "binary_rank3_weights",
            "BinaryClassHead",
            {"weight_column": "w", "thresholds": [0.5]},
            np.asarray(LOGITS1).reshape(2, 3, 1).tolist(),
            np.asarray(LABELS01).reshape(2, 3, 1).tolist(),
            {"w": weights3d},
        ),
        _case(
            "multiclass_rank3_weights",
            "MultiClassHead",
            {"n_classes": 3, "weight_column": "w"},
            logits3d,
            labels3d,
            {"w": weights3d},
        ),
        _case(
            "multilabel_rank3",
            "MultiLabelHead",
            {"n_classes": 3, "thresholds": [0.5], "classes_for_class_based_metrics": [1]},
            logits3d,
            np.asarray(MULTILABEL).reshape(2, 3, 3).tolist(),
        ),
        _case(
            "regression_rank3_dim3",
            "RegressionHead",
            {"label_dimension": 3},
            logits3d,
            (np.asarray(logits3d) * 0.5 + 0.1).tolist(),
        ),
        _case(
            "regression_per_logit_weights",
            "RegressionHead",
            {"label_dimension": 2, "weight_column": "w2"},
            [r[:2] for r in LOGITS3],
            REG_LABELS2,
            {"w2": [[1.0, 0.0], [0.5, 2.0], [1.0, 1.0], [3.0, 0.5], [0.0, 0.0], [1.5, 1.0]]},
        ),
        _case(
            "regression_auto_reduction",
            "RegressionHead",
            {"loss_reduction": "auto"},
            LOGITS1,
            [[0.5], [0.0], [1.5], [-1.0], [0.3], [2.0]],
        ),
        _case(
            "binary_numeric_column_normalizer",
            "BinaryClassHead",
            {"weight_column": {"numeric_column": "w", "normalizer": "double"}, "loss_reduction": "sum"},
            LOGITS1,
            LABELS01,
            {"w": WEIGHTS},
        ),
        _case(
            "multilabel_sparse_ids",
            "MultiLabelHead",
            {"n_classes": 3, "weight_column": "w"},
            LOGITS3,
            _sparse(MULTILABEL),
            {"w": WEIGHTS},
        ),
        _case(
            "multilabel_sparse_names",
            "MultiLabelHead",
            {"n_classes": 3, "label_vocabulary": vocab, "classes_for_class_based_metrics": ["b"]},
            LOGITS3,
            _sparse(MULTILABEL, vocab),
        ),
    ]


def main() -> None:
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    data: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "tensorflow_estimator": tfe.__version__ if hasattr(tfe, "__version__") else "2.15",
        "loss_fns": LOSS_FNS,
        "cases": [],
        "more_cases": [],
        "errors": [],
        "estimator": [],
    }
    for case in cases():
        case.update(run_case(case))
        case["eager"] = run_eager(case)
        data["cases"].append(case)
    for case in more_cases():
        case.update(run_case(case))
        case["eager"] = run_eager(case)
        data["more_cases"].append(case)
    for case in error_cases():
        case.update(run_error(case))
        data["errors"].append(case)
    workdir = tempfile.mkdtemp()
    try:
        for case in estimator_cases():
            case.update(run_estimator(case, workdir))
            data["estimator"].append(case)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    print(
        f"wrote {OUT}: {len(data['cases'])} cases, {len(data['errors'])} errors, {len(data['estimator'])} estimator runs"
    )


if __name__ == "__main__":
    main()
