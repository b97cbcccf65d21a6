"""Reference numbers for the heads, from TensorFlow 2.15's real tf.estimator heads.

Run in a TF 2.15 virtual environment (CI never runs it; TF 2.15 is no dependency)::

    /tmp/tf215venv/bin/python tools/tf215_heads_reference.py      (or tools/tf215_heads_reference.sh)

It writes ``tests/data/tf215_heads.json``, read by ``tests/test_tf_heads*.py`` (tf_bridge's
heads) and by the JAX-side heads' tests. Layout::

    {
      "tensorflow": "2.15.x", "tensorflow_estimator": "2.15.x",
      "loss_fns": {name: description},        # named loss_fn / inverse_link_fn, see _LOSS_FNS
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
import re
import shutil
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_estimator as tfe
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.saved_model.model_utils import export_utils

est = tf.estimator
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf215_heads.json")
v1 = tf.compat.v1

_LOSS_FNS = {
    "abs_error": "labels, logits -> |labels - logits| (elementwise; regression)",
    "weighted_sigmoid": "labels, logits, features -> sigmoid cross entropy * (1 + features['w'])",
    "exp": "inverse_link_fn: exp(logits)",
}


def _loss_fn(name: str) -> Any:
    if name == "abs_error":
        return lambda labels, logits: tf.abs(labels - logits)
    if name == "weighted_sigmoid":

        def weighted_sigmoid(labels, logits, features):
            xent = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            return xent * (1.0 + tf.cast(features["w"], tf.float32))

        return weighted_sigmoid
    if name == "exp":
        return tf.math.exp
    raise KeyError(name)


def build_head(spec: dict[str, Any]) -> Any:
    kwargs = dict(spec["kwargs"])
    for arg in ("loss_fn", "inverse_link_fn"):
        if arg in kwargs:
            kwargs[arg] = _loss_fn(kwargs[arg])
    if isinstance(kwargs.get("weight_column"), dict):  # {"numeric_column": key, "normalizer": name}
        column = kwargs["weight_column"]
        normalizer = {"double": lambda w: 2.0 * w, None: None}[column.get("normalizer")]
        kwargs["weight_column"] = tf.feature_column.numeric_column(
            column["numeric_column"], normalizer_fn=normalizer
        )
    if spec["class"] == "MultiHead":
        kwargs["heads"] = [build_head(h) for h in kwargs["heads"]]
    return getattr(est, spec["class"])(**kwargs)


def _tensor(value: Any) -> Any:
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        return tf.constant(arr.astype(str))
    if arr.dtype.kind == "f":
        return tf.constant(arr.astype(np.float32))
    return tf.constant(arr.astype(np.int64))


def _fed(value: Any) -> Any:
    """A tensor whose value the graph builder does not see (as from an input pipeline)."""
    t = _tensor(value)
    if tf.executing_eagerly():
        return t
    shape = [None] + t.shape.as_list()[1:] if _UNKNOWN_BATCH and t.shape.rank else t.shape
    return v1.placeholder_with_default(t, shape)


_UNKNOWN_BATCH = False  # True while an error case of mode "graph_unknown_batch" runs


def _labels(value: Any) -> Any:
    if isinstance(value, dict) and "__sparse__" in value:  # {"__sparse__": {indices, values, dense_shape}}
        sp = value["__sparse__"]
        return tf.SparseTensor(tf.constant(sp["indices"], tf.int64), _tensor(sp["values"]), sp["dense_shape"])
    if isinstance(value, dict):
        return {k: _fed(v) for k, v in value.items()}
    return None if value is None else _fed(value)


def _plain(value: Any) -> Any:
    arr = np.asarray(value)
    if arr.dtype.kind in "OSU":
        return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[object])(
            arr
        ).tolist()
    if arr.dtype.kind == "f":
        return arr.astype(np.float64).tolist()
    if arr.dtype.kind == "b":
        return arr.tolist()
    return arr.astype(np.int64).tolist()


def _key(key: Any) -> str:
    return "/".join(key) if isinstance(key, tuple) else key


def _signature(sig: Any) -> dict[str, Any]:
    def infos(m):
        out = {}
        for k, info in m.items():
            dims = [-1] if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
            out[k] = [_dtype_name(info.dtype), dims]
        return out

    return {"method_name": sig.method_name, "inputs": infos(sig.inputs), "outputs": infos(sig.outputs)}


def _dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(enum)


def _signature_defs(export_outputs: dict[str, Any], receiver: dict[str, Any]) -> dict[str, Any]:
    defs = export_utils.build_all_signature_defs(receiver, export_outputs, serving_only=True)
    return {k: _signature(v) for k, v in sorted(defs.items())}


def _metric_values(sess: Any, ops: dict[str, Any]) -> dict[str, float]:
    pairs = {}
    for key, value in ops.items():
        if isinstance(value, tuple):
            pairs[key] = value
        else:  # a Keras metric object
            pairs[key] = (value.result(), value.updates)
    sess.run(v1.local_variables_initializer())
    sess.run(v1.tables_initializer())
    sess.run([p[1] for p in pairs.values()])
    return {k: float(sess.run(p[0])) for k, p in sorted(pairs.items())}


def _train_op_fn(loss: Any) -> Any:
    return tf.group(tf.identity(loss))


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    inputs = case["inputs"]
    logits_value = np.asarray(inputs["logits"], np.float32)
    result: dict[str, Any] = {}
    with tf.Graph().as_default():
        head = build_head(case["head"])
        features = {k: _fed(v) for k, v in inputs["features"].items()}
        reg = inputs.get("regularization_losses")
        reg_t = [tf.constant(r, tf.float32) for r in reg] if reg is not None else None
        logits = _fed(logits_value)
        labels = _labels(inputs["labels"])
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
            train_op_fn=_train_op_fn,
            regularization_losses=reg_t,
        )
        with v1.Session() as sess:
            sess.run(v1.tables_initializer())
            result["loss"] = float(sess.run(loss))
            result["train"] = {"loss": float(sess.run(train_spec.loss))}
            result["eval"] = {
                "loss": float(sess.run(eval_spec.loss)),
                "metrics": _metric_values(sess, eval_spec.eval_metric_ops),
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
            _key(k): _plain(v) for k, v in sorted(preds.items(), key=lambda i: _key(i[0]))
        }
        result["export_outputs"] = {k: type(v).__name__ for k, v in sorted(spec.export_outputs.items())}
        result["predict_output_keys"] = {
            k: sorted(v.outputs) for k, v in sorted(spec.export_outputs.items()) if hasattr(v, "outputs")
        }
        result["signature_defs"] = {"raw": _signature_defs(spec.export_outputs, {"logits": ph})}
    with tf.Graph().as_default():
        head = build_head(case["head"])
        serialized = v1.placeholder(tf.string, [None], name="input_example_tensor")
        parsed = tf.io.parse_example(serialized, {"logits": tf.io.FixedLenFeature(inner, tf.float32)})
        spec = head.create_estimator_spec(features={}, mode=est.ModeKeys.PREDICT, logits=parsed["logits"])
        result["signature_defs"]["example"] = _signature_defs(spec.export_outputs, {"inputs": serialized})
    return result


B = 6
LOGITS1 = [[-1.5], [0.4], [2.0], [-0.3], [0.0], [1.1]]
LABELS01 = [[0], [1], [1], [1], [0], [0]]
LOGITS3 = [
    [1.0, 0.2, -0.5],
    [0.1, 1.3, 0.0],
    [-0.4, 0.3, 0.9],
    [2.0, -1.0, 0.5],
    [0.0, 0.0, 0.7],
    [0.6, 0.8, -0.2],
]
LABELS3 = [[0], [2], [2], [0], [1], [1]]
WEIGHTS = [[1.0], [0.5], [2.0], [0.0], [1.5], [1.0]]
MULTILABEL = [[1, 0, 1], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0], [1, 0, 1]]
REG_LABELS2 = [[0.5, -1.0], [1.0, 0.2], [-0.3, 0.9], [2.0, 1.5], [0.0, 0.0], [0.7, -0.4]]
COUNTS = [[0.0], [1.0], [3.0], [0.0], [2.0], [5.0]]


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
    features = {k: _fed(v) for k, v in inputs["features"].items()}
    reg = inputs.get("regularization_losses")
    reg_t = [tf.constant(r, tf.float32) for r in reg] if reg is not None else None
    logits = tf.constant(np.asarray(inputs["logits"], np.float32))
    loss = head.loss(
        labels=_labels(inputs["labels"]), logits=logits, features=features, regularization_losses=reg_t
    )
    preds = head.predictions(logits)
    return {
        "loss": float(loss.numpy()),
        "predictions": {
            _key(k): _plain(v.numpy()) for k, v in sorted(preds.items(), key=lambda i: _key(i[0]))
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


# ---- bad input -------------------------------------------------------------------------


def _error(name, head, call, inputs=None, mode="graph"):
    return {"name": name, "head": head, "call": call, "mode": mode, "inputs": inputs}


def _h(cls, **kwargs):
    return {"class": cls, "kwargs": kwargs}


def _inp(logits, labels, features=None):
    return {"logits": logits, "labels": labels, "features": features or {}, "regularization_losses": None}


def error_cases() -> list[dict[str, Any]]:
    binary, multi3, reg = _h("BinaryClassHead"), _h("MultiClassHead", n_classes=3), _h("RegressionHead")
    mh = _h("MultiHead", heads=[_h("MultiClassHead", n_classes=3, name="m"), _h("BinaryClassHead", name="b")])
    out = [
        _error("binary_bad_loss_reduction", _h("BinaryClassHead", loss_reduction="mean"), "init"),
        _error("binary_none_loss_reduction", _h("BinaryClassHead", loss_reduction="none"), "init"),
        _error("binary_threshold_out_of_range", _h("BinaryClassHead", thresholds=[0.5, 1.0]), "init"),
        _error("binary_vocab_not_list", _h("BinaryClassHead", label_vocabulary="ab"), "init"),
        _error("multiclass_n_classes_2", _h("MultiClassHead", n_classes=2), "init"),
        _error(
            "multiclass_vocab_length", _h("MultiClassHead", n_classes=3, label_vocabulary=["a", "b"]), "init"
        ),
        _error("multilabel_n_classes_1", _h("MultiLabelHead", n_classes=1), "init"),
        _error(
            "multilabel_class_out_of_range",
            _h("MultiLabelHead", n_classes=3, classes_for_class_based_metrics=[3]),
            "init",
        ),
        _error(
            "multilabel_class_strings_no_vocab",
            _h("MultiLabelHead", n_classes=3, classes_for_class_based_metrics=["a"]),
            "init",
        ),
        _error("regression_label_dimension_0", _h("RegressionHead", label_dimension=0), "init"),
        _error("multihead_unnamed", _h("MultiHead", heads=[_h("BinaryClassHead")]), "init"),
        _error("multihead_no_heads", _h("MultiHead", heads=[]), "init"),
        _error(
            "multihead_weights_length",
            _h("MultiHead", heads=[_h("BinaryClassHead", name="b")], head_weights=[1.0, 2.0]),
            "init",
        ),
        _error("loss_fn_missing_logits", _h("RegressionHead", loss_fn="no_logits"), "init"),
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
                _h("BinaryClassHead", label_vocabulary=["neg", "pos"]),
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
                _h("MultiClassHead", n_classes=3, label_vocabulary=["a", "b", "c"]),
                "loss",
                _inp(LOGITS3, LABELS3),
                mode,
            ),
            _error(
                "multiclass_logits_width_2", multi3, "predictions", _inp([r[:2] for r in LOGITS3], None), mode
            ),
            _error(
                "missing_weight_column",
                _h("MultiClassHead", n_classes=3, weight_column="w"),
                "loss",
                _inp(LOGITS3, LABELS3),
                mode,
            ),
            _error(
                "weights_wrong_shape",
                _h("BinaryClassHead", weight_column="w"),
                "loss",
                _inp(LOGITS1, LABELS01, {"w": WEIGHTS[:4]}),
                mode,
            ),
            _error(
                "weights_string",
                _h("BinaryClassHead", weight_column="w"),
                "loss",
                _inp(LOGITS1, LABELS01, {"w": [["a"]] * B}),
                mode,
            ),
            _error(
                "regression_labels_width_1_for_dim_2",
                _h("RegressionHead", label_dimension=2),
                "loss",
                _inp([r[:2] for r in LOGITS3], [[0.0]] * B),
                mode,
            ),
            _error(
                "multilabel_labels_not_indicator",
                _h("MultiLabelHead", n_classes=3),
                "loss",
                _inp(LOGITS3, [[2, 0, 1]] + MULTILABEL[1:]),
                mode,
            ),
            _error(
                "multilabel_labels_width_2",
                _h("MultiLabelHead", n_classes=3),
                "loss",
                _inp(LOGITS3, [r[:2] for r in MULTILABEL]),
                mode,
            ),
            _error(
                "logistic_regression_label_above_1",
                _h("LogisticRegressionHead"),
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
            _h(
                "MultiHead",
                heads=[_h("BinaryClassHead", name="b"), _h("RegressionHead", name="r", loss_reduction="sum")],
            ),
            "loss_reduction",
        ),
    ]
    return out


def _logits_of(value):
    if isinstance(value, dict):
        return {k: _fed(np.asarray(v, np.float32)) for k, v in value.items()}
    return _fed(np.asarray(value, np.float32))


def _call(head: Any, call: str, inputs: dict[str, Any]) -> Any:
    """What the error case calls; returns tensors to run in graph mode."""
    features = {k: _fed(v) for k, v in inputs["features"].items()}
    logits = _logits_of(inputs["logits"])
    labels = _labels(inputs["labels"])
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
        return head.create_estimator_spec(**train, train_op_fn=_train_op_fn, update_ops=tf.no_op()).loss
    if call == "train_spec_both":
        opt = tf.keras.optimizers.legacy.SGD(0.1)
        return head.create_estimator_spec(**train, train_op_fn=_train_op_fn, optimizer=opt).loss
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
    global _UNKNOWN_BATCH
    _UNKNOWN_BATCH = case["mode"] == "graph_unknown_batch"
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
    _UNKNOWN_BATCH = False
    return result


# ---- through tf.estimator.Estimator --------------------------------------------------

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
            _h("BinaryClassHead", weight_column="w", thresholds=[0.4], label_vocabulary=["no", "yes"]),
            1,
            [[["no", "yes"][v[0]]] for v in bin8],
            weights=True,
        ),
        c("binary_keras_sgd", _h("BinaryClassHead"), 1, bin8, optimizer="sgd"),
        c("multiclass", _h("MultiClassHead", n_classes=3), 3, cls8),
        c("regression_weights", _h("RegressionHead", weight_column="w"), 1, reg8, weights=True),
        c("multilabel", _h("MultiLabelHead", n_classes=3, thresholds=[0.5]), 3, ml8),
        c(
            "multihead",
            _h(
                "MultiHead",
                heads=[_h("MultiClassHead", n_classes=3, name="m"), _h("RegressionHead", name="r")],
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
        {_key(k): _plain(v) for k, v in sorted(p.items(), key=lambda i: _key(i[0]))}
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
        "signature_defs": {k: _signature(sigs[k]) for k in sorted(sigs)},
    }


def main() -> None:
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    data: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "tensorflow_estimator": tfe.__version__ if hasattr(tfe, "__version__") else "2.15",
        "loss_fns": _LOSS_FNS,
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
