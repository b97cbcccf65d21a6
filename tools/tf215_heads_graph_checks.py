"""Reference for when the heads check shapes: TF 2.15's heads against tf_bridge's (issue 37).

In graph mode TF 2.15's heads refuse some shapes while the graph is built (ValueError)
and check the rest when it runs (``tf.errors.InvalidArgumentError``), static shapes or
not; in eager mode they raise ValueError at once. Each case here builds one head call and
records where it fails (``stage``: "build", "run" or "none"), the exception type, and,
when it does not fail, the values it computed (float32 values also as their bits).

Run in the TF 2.15 virtual environment (CI never runs it)::

    /tmp/tf215venv/bin/python tools/tf215_heads_graph_checks.py

It writes ``tests/data/tf215_heads_graph_checks.json``: ``{"tensorflow": str, "cases":
{name: {"mode": "graph"|"eager", "stage": str, "error": str|null, "values": {key:
nested list}|null}}}``. ``tests/test_tf_heads_graph_checks.py`` runs the same cases
(``CASES``, ``run_case``) with tf_bridge's heads and compares.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
LOGITS_2x3 = np.array([[-1.0, 1.0, 0.0], [0.5, -0.5, 2.0]], np.float32)
LOGITS_2x2x3 = np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 10.0


def _const_loss(value: Any) -> Callable[..., Any]:
    def loss_fn(labels: Any, logits: Any) -> Any:
        del labels, logits
        return tf.constant(np.asarray(value, np.float32))

    return loss_fn


def _from_logits(labels: Any, logits: Any) -> Any:
    """A loss_fn of the right shape that ignores the labels' values."""
    del labels
    return tf.reduce_sum(logits, axis=-1, keepdims=True)


# name -> (modes, fn(heads, graph) -> (fetches, feed dict)); ``heads`` is a module with
# tf.estimator's head classes (TF 2.15's head package, or tf_bridge.heads).
def _loss_fn_shape(head_name: str, kwargs: dict[str, Any], logits: Any, labels: Any, bad: Any) -> Any:
    def build(heads: Any, graph: bool) -> Any:
        head = getattr(heads, head_name)(loss_fn=_const_loss(bad), **kwargs)
        return {"loss": head.loss(labels=labels, logits=logits, features={"x": logits})}, {}

    return build


def _weights(head_name: str, kwargs: dict[str, Any], logits: Any, labels: Any, weights: Any) -> Any:
    def build(heads: Any, graph: bool) -> Any:
        head = getattr(heads, head_name)(weight_column="w", **kwargs)
        return {"loss": head.loss(labels=labels, logits=logits, features={"w": weights})}, {}

    return build


def _unknown_rank(
    head_name: str, kwargs: dict[str, Any], logits: Any, labels: Any, dtype: Any, what: str = "labels"
) -> Any:
    """``what`` (labels or weights) fed to a placeholder of unknown shape."""

    def build(heads: Any, graph: bool) -> Any:
        ph = v1.placeholder(dtype)
        head = getattr(heads, head_name)(**kwargs, **({"weight_column": "w"} if what == "weights" else {}))
        if what == "labels":
            loss = head.loss(labels=ph, logits=logits, features={})
            return {"loss": loss}, {ph: labels}
        loss = head.loss(labels=np.zeros([2, 1], np.int64), logits=logits, features={"w": ph})
        return {"loss": loss}, {ph: labels}

    return build


def _labels_batch(head_name: str, kwargs: dict[str, Any], logits: Any, labels: Any) -> Any:
    def build(heads: Any, graph: bool) -> Any:
        head = getattr(heads, head_name)(**kwargs)
        return {"loss": head.loss(labels=labels, logits=logits, features={})}, {}

    return build


def _tensor_n_classes(n: int) -> Any:
    def build(heads: Any, graph: bool) -> Any:
        head = heads.MultiClassHead(n_classes=tf.constant(n))
        preds = head.predictions(LOGITS_2x3)
        # int32 labels: TF 2.15 compared int64 labels with the int32 tensor and failed
        loss = head.loss(labels=np.array([[0], [2]], np.int32), logits=LOGITS_2x3, features={})
        keys = ("probabilities", "class_ids", "all_class_ids", "all_classes")
        return {"loss": loss, **{k: preds[k] for k in keys}}, {}

    return build


def _binary_average_loss(heads: Any, graph: bool) -> Any:
    """binary_class_head_test's float-labels case: loss and average_loss, bit for bit."""
    head = heads.BinaryClassHead()
    logits = np.array([[0.5], [-0.3]], np.float32)
    labels = np.array([[0.8], [0.4]], np.float32)
    features = {"x": np.array([[42.0]], np.float32)}
    if not graph:
        metrics = head.update_metrics(head.metrics(), features, logits, labels)
        loss = head.loss(labels=labels, logits=logits, features=features)
        return {"loss": loss, "average_loss": metrics["average_loss"].result()}, {}
    spec = head.create_estimator_spec(features=features, mode="eval", logits=logits, labels=labels)
    value, update = spec.eval_metric_ops["average_loss"]
    return {"loss": spec.loss, "average_loss": value, "_update": update}, {}


I64, F32 = np.int64, np.float32
CASES: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    # loss_fn returning another shape than logits' batch shape + [d]
    "multiclass_loss_fn_shape": (
        ("graph", "eager"),
        _loss_fn_shape("MultiClassHead", {"n_classes": 3}, LOGITS_2x3, np.array([[1], [2]], I64), [1.0, 2.0]),
    ),
    "binary_loss_fn_shape": (
        ("graph", "eager"),
        _loss_fn_shape("BinaryClassHead", {}, LOGITS_2x3[:, :1], np.array([[1], [0]], F32), [1.0, 2.0]),
    ),
    "multilabel_loss_fn_shape": (
        ("graph", "eager"),
        _loss_fn_shape(
            "MultiLabelHead", {"n_classes": 2}, LOGITS_2x3[:, :2], np.array([[1, 0], [0, 1]], I64), [1.0, 2.0]
        ),
    ),
    "regression_loss_fn_shape": (
        ("graph", "eager"),
        _loss_fn_shape(
            "RegressionHead", {"label_dimension": 2}, LOGITS_2x3[:, :2], LOGITS_2x3[:, :2], [[1.0], [2.0]]
        ),
    ),
    # weights [2, 1] for logits [2, 2, d]: broadcastable, wrong inner dimension
    "multiclass_weights_inner_dim": (
        ("graph", "eager"),
        _weights(
            "MultiClassHead", {"n_classes": 3}, LOGITS_2x2x3, np.zeros([2, 2, 1], I64), np.ones([2, 1], F32)
        ),
    ),
    "binary_weights_inner_dim": (
        ("graph", "eager"),
        _weights(
            "BinaryClassHead", {}, LOGITS_2x2x3[..., :1], np.zeros([2, 2, 1], F32), np.ones([2, 1], F32)
        ),
    ),
    "regression_weights_per_logit_wrong": (
        ("graph", "eager"),
        _weights(
            "RegressionHead", {"label_dimension": 3}, LOGITS_2x2x3, LOGITS_2x2x3, np.ones([2, 2, 2], F32)
        ),
    ),
    "multiclass_weights_ok": (
        ("graph",),
        _weights(
            "MultiClassHead",
            {"n_classes": 3},
            LOGITS_2x2x3,
            np.zeros([2, 2, 1], I64),
            np.full([2, 2], 2.0, F32),
        ),
    ),
    # labels or weights of unknown rank, fed at run time
    "multilabel_labels_unknown_rank_2x1": (
        ("graph",),
        _unknown_rank(
            "MultiLabelHead", {"n_classes": 2}, LOGITS_2x3[:, :2], np.array([[1], [1]], I64), tf.int64
        ),
    ),
    "multilabel_labels_unknown_rank_rank1": (
        ("graph",),
        _unknown_rank("MultiLabelHead", {"n_classes": 2}, LOGITS_2x3[:, :2], np.array([1, 1], I64), tf.int64),
    ),
    "multilabel_labels_unknown_rank_ok": (
        ("graph",),
        _unknown_rank(
            "MultiLabelHead", {"n_classes": 2}, LOGITS_2x3[:, :2], np.array([[1, 0], [1, 1]], I64), tf.int64
        ),
    ),
    "multiclass_labels_unknown_rank_3x1": (
        ("graph",),
        _unknown_rank(
            "MultiClassHead", {"n_classes": 3}, LOGITS_2x3, np.array([[1], [1], [0]], I64), tf.int64
        ),
    ),
    "multiclass_labels_unknown_rank_ok": (
        ("graph",),
        _unknown_rank("MultiClassHead", {"n_classes": 3}, LOGITS_2x3, np.array([[1], [2]], I64), tf.int64),
    ),
    "multiclass_weights_unknown_rank_ok": (
        ("graph",),
        _unknown_rank(
            "MultiClassHead",
            {"n_classes": 3},
            LOGITS_2x3,
            np.array([[2.0], [0.5]], F32),
            tf.float32,
            "weights",
        ),
    ),
    "multiclass_weights_unknown_rank_wrong": (
        ("graph",),
        _unknown_rank(
            "MultiClassHead", {"n_classes": 3}, LOGITS_2x3, np.ones([2, 2], F32), tf.float32, "weights"
        ),
    ),
    # labels of another batch size, static shapes: the default losses refuse while building
    "multiclass_labels_batch_custom_loss": (
        ("graph", "eager"),
        _labels_batch(
            "MultiClassHead", {"n_classes": 3, "loss_fn": _from_logits}, LOGITS_2x3, np.zeros([3, 1], I64)
        ),
    ),
    "regression_labels_batch_3": (
        ("graph", "eager"),
        _labels_batch("RegressionHead", {}, LOGITS_2x3[:, :1], np.zeros([3, 1], F32)),
    ),
    "regression_labels_batch_1": (
        ("graph", "eager"),
        _labels_batch("RegressionHead", {}, LOGITS_2x3[:, :1], np.zeros([1, 1], F32)),
    ),
    "multiclass_n_classes_tensor": (("graph", "eager"), _tensor_n_classes(3)),
    "multiclass_n_classes_tensor_2": (("graph", "eager"), _tensor_n_classes(2)),
    "binary_average_loss": (("graph", "eager"), _binary_average_loss),
}


def _plain(value: Any) -> Any:
    value = np.asarray(value)
    if value.dtype.kind in "SUO":
        return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s))(value).tolist()
    if value.dtype == np.float32:
        return {"float32": value.tolist(), "bits": value.view(np.int32).tolist()}
    return value.tolist()


def run_case(name: str, mode: str, heads: Any) -> dict[str, Any]:
    """``{"stage", "error", "values"}`` of case ``name`` in ``mode`` with ``heads``."""
    build = CASES[name][1]
    result: dict[str, Any] = {"stage": "none", "error": None, "values": None}
    if mode == "eager":
        try:
            fetches, _ = build(heads, False)
        except Exception as exc:  # noqa: BLE001 - the type is what is recorded
            return {**result, "stage": "build", "error": type(exc).__name__}
        return {**result, "values": {k: _plain(v) for k, v in fetches.items() if not k.startswith("_")}}
    with tf.Graph().as_default():
        try:
            fetches, feed = build(heads, True)
        except Exception as exc:  # noqa: BLE001
            return {**result, "stage": "build", "error": type(exc).__name__}
        with v1.Session() as sess:
            sess.run(
                [v1.global_variables_initializer(), v1.local_variables_initializer(), v1.tables_initializer()]
            )
            try:
                if "_update" in fetches:
                    sess.run(fetches.pop("_update"), feed)
                values = sess.run(fetches, feed)
            except Exception as exc:  # noqa: BLE001
                return {**result, "stage": "run", "error": type(exc).__name__}
    return {**result, "values": {k: _plain(v) for k, v in values.items()}}


def main() -> None:
    heads = tf.estimator  # TF 2.15's head classes
    out = {"tensorflow": tf.__version__, "cases": {}}
    for name, (modes, _) in CASES.items():
        for mode in modes:
            out["cases"][f"{name}[{mode}]"] = {"mode": mode, **run_case(name, mode, heads)}
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "tf215_heads_graph_checks.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    for key, case in out["cases"].items():
        print(f"{key:48s} {case['stage']:6s} {case['error']}")


if __name__ == "__main__":
    main()
