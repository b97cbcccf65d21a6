"""What tools/tf215_heads_reference*.py share: building TF 2.15's heads from the JSON's
head specs, the input tensors, signature-def and value encodings, and the case data."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.saved_model.model_utils import export_utils

est = tf.estimator
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf215_heads.json")
v1 = tf.compat.v1

LOSS_FNS = {
    "abs_error": "labels, logits -> |labels - logits| (elementwise; regression)",
    "weighted_sigmoid": "labels, logits, features -> sigmoid cross entropy * (1 + features['w'])",
    "exp": "inverse_link_fn: exp(logits)",
}


def named_fn(name: str) -> Any:
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
            kwargs[arg] = named_fn(kwargs[arg])
    if isinstance(kwargs.get("weight_column"), dict):  # {"numeric_column": key, "normalizer": name}
        column = kwargs["weight_column"]
        normalizer = {"double": lambda w: 2.0 * w, None: None}[column.get("normalizer")]
        kwargs["weight_column"] = tf.feature_column.numeric_column(
            column["numeric_column"], normalizer_fn=normalizer
        )
    if spec["class"] == "MultiHead":
        kwargs["heads"] = [build_head(h) for h in kwargs["heads"]]
    return getattr(est, spec["class"])(**kwargs)


def tensor(value: Any) -> Any:
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        return tf.constant(arr.astype(str))
    if arr.dtype.kind == "f":
        return tf.constant(arr.astype(np.float32))
    return tf.constant(arr.astype(np.int64))


def fed(value: Any) -> Any:
    """A tensor whose value the graph builder does not see (as from an input pipeline)."""
    t = tensor(value)
    if tf.executing_eagerly():
        return t
    shape = [None] + t.shape.as_list()[1:] if STATE["unknown_batch"] and t.shape.rank else t.shape
    return v1.placeholder_with_default(t, shape)


STATE = {"unknown_batch": False}  # True while an error case of mode "graph_unknown_batch" runs


def labels_of(value: Any) -> Any:
    if isinstance(value, dict) and "__sparse__" in value:  # {"__sparse__": {indices, values, dense_shape}}
        sp = value["__sparse__"]
        return tf.SparseTensor(tf.constant(sp["indices"], tf.int64), tensor(sp["values"]), sp["dense_shape"])
    if isinstance(value, dict):
        return {k: fed(v) for k, v in value.items()}
    return None if value is None else fed(value)


def plain(value: Any) -> Any:
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


def key_of(key: Any) -> str:
    return "/".join(key) if isinstance(key, tuple) else key


def signature(sig: Any) -> dict[str, Any]:
    def infos(m):
        out = {}
        for k, info in m.items():
            dims = [-1] if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
            out[k] = [dtype_name(info.dtype), dims]
        return out

    return {"method_name": sig.method_name, "inputs": infos(sig.inputs), "outputs": infos(sig.outputs)}


def dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(enum)


def signature_defs(export_outputs: dict[str, Any], receiver: dict[str, Any]) -> dict[str, Any]:
    defs = export_utils.build_all_signature_defs(receiver, export_outputs, serving_only=True)
    return {k: signature(v) for k, v in sorted(defs.items())}


def metric_values(sess: Any, ops: dict[str, Any]) -> dict[str, float]:
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


def train_op_fn(loss: Any) -> Any:
    return tf.group(tf.identity(loss))


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
