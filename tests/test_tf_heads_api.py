"""tf_bridge's heads beyond the value tables: the TPUEstimatorSpec path, users' own heads,
SparseTensor labels of a MultiLabelHead, the TRAIN summaries, and error messages that
name the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
from tests.test_tf_heads import (
    CASES,
    DATA,
    _case_inputs,
    build_head,
    labels_of,
    metric_values,
    run_error,
    tensor,
)
from tf_bridge.runtime import heads

v1 = tf.compat.v1
ModeKeys = tf_bridge.ModeKeys


@pytest.mark.parametrize(
    "name", ["binary_weights_thresholds_vocab_sum", "multilabel_class_ids", "regression_default"]
)
def test_tpu_estimator_spec_eval_metrics_match_tf215(name: str) -> None:
    case = CASES[name]
    with tf.Graph().as_default():
        head = build_head(case["head"])
        features, logits, labels, reg = _case_inputs(case)
        spec = head._create_tpu_estimator_spec(
            features=features, mode=ModeKeys.EVAL, logits=logits, labels=labels, regularization_losses=reg
        )
        assert isinstance(spec, tf_bridge.TPUEstimatorSpec)
        metric_fn, tensors = spec.eval_metrics
        assert set(tensors) <= {"logits", "labels"} and all(tf.is_tensor(t) for t in tensors.values())
        ops = spec.as_estimator_spec().eval_metric_ops
        with v1.Session() as sess:
            got = metric_values(sess, ops)
            assert sess.run(spec.loss) == pytest.approx(case["eval"]["loss"], abs=1e-5)
    assert got == pytest.approx(case["eval"]["metrics"], abs=1e-5)


class MeanAbsoluteHead(heads.Head):
    """A user's head: mean absolute error, built on the TPU spec path like TF's heads."""

    name = None
    logits_dimension = 1
    loss_reduction = "sum_over_batch_size"

    def loss(self, labels, logits, features=None, mode=None, regularization_losses=None):
        return tf.reduce_mean(tf.abs(tf.cast(labels, tf.float32) - logits))

    def predictions(self, logits, keys=None):
        return {"predictions": logits}

    def metrics(self, regularization_losses=None):
        return {}

    def update_metrics(self, eval_metrics, features, logits, labels, mode=None, regularization_losses=None):
        return eval_metrics

    def _create_tpu_estimator_spec(self, features, mode, logits, labels=None, **kwargs):
        loss = self.loss(labels, logits)
        return tf_bridge.TPUEstimatorSpec(mode=mode, loss=loss, predictions=self.predictions(logits))


class NoSpecHead(MeanAbsoluteHead):
    _create_tpu_estimator_spec = heads.Head._create_tpu_estimator_spec


def test_users_head_subclass() -> None:
    with pytest.raises(TypeError):
        heads.Head()  # abstract
    with tf.Graph().as_default():
        logits = tf.constant([[1.0], [2.0]])
        spec = MeanAbsoluteHead().create_estimator_spec(
            {}, ModeKeys.EVAL, logits, tf.constant([[0.0], [4.0]])
        )
        assert isinstance(spec, tf_bridge.EstimatorSpec)
        with v1.Session() as sess:
            assert sess.run(spec.loss) == pytest.approx(1.5)
        with pytest.raises(NotImplementedError, match="create_estimator_spec"):
            NoSpecHead().create_estimator_spec({}, ModeKeys.EVAL, logits, tf.constant([[0.0], [4.0]]))


def _dense_to_sparse(indicator: list[list[int]], vocab: list[str] | None) -> tf.SparseTensor:
    """Each row's positive class ids (or names), left-aligned, as a SparseTensor [batch, 3]."""
    indices, values = [], []
    for r, row in enumerate(indicator):
        for j, c in enumerate(i for i, v in enumerate(row) if v):
            indices.append([r, j])
            values.append(c)
    vals = tf.constant([vocab[v] for v in values]) if vocab else tf.constant(values, tf.int64)
    return tf.SparseTensor(tf.constant(indices, tf.int64), vals, [len(indicator), 3])


@pytest.mark.parametrize("vocab", [None, ["a", "b", "c"]])
def test_multilabel_sparse_labels_equal_indicator_labels(vocab: list[str] | None) -> None:
    """Sparse class ids (or names) give TF 2.15's numbers for the same labels as an indicator."""
    case = CASES["multilabel_thresholds_classes_vocab_weights"]
    kwargs = dict(case["head"]["kwargs"])
    if vocab is None:
        kwargs.pop("label_vocabulary")
        kwargs["classes_for_class_based_metrics"] = [0, 2]
    with tf.Graph().as_default():
        head = heads.MultiLabelHead(**kwargs)
        features, logits, _, _ = _case_inputs(case)
        sparse = _dense_to_sparse(case["inputs"]["labels"], vocab)
        spec = head.create_estimator_spec(features=features, mode=ModeKeys.EVAL, logits=logits, labels=sparse)
        with v1.Session() as sess:
            sess.run(v1.tables_initializer())
            assert sess.run(spec.loss) == pytest.approx(case["loss"], abs=1e-5)
            got = metric_values(sess, spec.eval_metric_ops)
    want = case["eval"]["metrics"]
    if vocab is None:  # class-based keys by id instead of name
        want = {k.replace("/a/", "/class0/").replace("/c/", "/class2/"): v for k, v in want.items()}
    assert got == pytest.approx(want, abs=1e-5)


def test_train_summaries_and_update_ops() -> None:
    with tf.Graph().as_default():
        head = heads.BinaryClassHead(name="bin")
        counter = v1.get_variable("counter", initializer=0.0)
        bump = v1.assign_add(counter, 1.0)
        spec = head.create_estimator_spec(
            features={},
            mode=ModeKeys.TRAIN,
            logits=tf.constant([[0.5], [-1.0]]),
            labels=tf.constant([[1], [0]]),
            train_op_fn=lambda loss: tf.no_op(),
            update_ops=[bump],
            regularization_losses=[tf.constant(0.25)],
        )
        merged = v1.summary.merge_all()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(spec.train_op)
            assert sess.run(counter) == 1.0
            summary = v1.Summary.FromString(sess.run(merged))
            tags = sorted(v.tag for v in summary.value)
            want = np.mean(np.log1p(np.exp(-np.array([0.5, 1.0])))) + 0.25
            assert sess.run(spec.loss) == pytest.approx(want, abs=1e-6)
    assert tags == ["loss/bin", "regularization_loss/bin"]


# The word each bad-input message must contain (the argument it is about).
_FIELD_WORDS = [
    ("class_out_of_range", "classes_for_class_based_metrics"),
    ("class_strings", "classes_for_class_based_metrics"),
    ("loss_reduction", "loss_reduction"),
    ("threshold", "threshold"),
    ("vocab", "vocabulary"),
    ("n_classes", "n_classes"),
    ("label_dimension", "label_dimension"),
    ("weight", "weight"),
    ("logits", "logits"),
    ("label", "label"),
    ("loss_fn", "loss_fn"),
    ("optimizer", "optimizer"),
    ("update_ops", "update_ops"),
    ("multihead", "head"),
    ("class", "class"),
    ("key", "key"),
]


@pytest.mark.parametrize("case", DATA["errors"], ids=lambda c: f"{c['name']}[{c['mode']}]")
def test_bad_input_messages_name_the_argument(case: dict[str, Any]) -> None:
    _, error, message = run_error(case)
    assert error is not None
    word = next(w for part, w in _FIELD_WORDS if part in case["name"])
    assert word in message.lower(), f"{case['name']}: {message!r} does not name {word!r}"


@pytest.mark.parametrize(
    "name",
    [
        "binary_weights_thresholds_vocab_sum",
        "multiclass_vocab_weights_sum",
        "multilabel_thresholds_classes_vocab_weights",
    ],
)
def test_eager_metrics_and_update_metrics_match_tf215(name: str) -> None:
    """``metrics()`` + ``update_metrics`` outside a graph, as TF 2.15 allowed."""
    case = CASES[name]
    assert tf.executing_eagerly()
    head = build_head(case["head"])
    inputs = case["inputs"]
    features = {k: tensor(v) for k, v in inputs["features"].items()}
    logits = tf.constant(np.asarray(inputs["logits"], np.float32))
    updated = head.update_metrics(head.metrics(), features, logits, labels_of(inputs["labels"]))
    got = {k: float(m.result()) for k, m in updated.items()}
    assert got == pytest.approx(case["eval"]["metrics"], abs=1e-5)


def test_multihead_dict_logits_equal_concatenated_logits() -> None:
    """Logits given per head (a dict) give TF 2.15's numbers for the concatenated case."""
    case = CASES["multihead_multiclass_binary_weighted"]
    logits = np.asarray(case["inputs"]["logits"], np.float32)
    with tf.Graph().as_default():
        head = build_head(case["head"])
        features, _, labels, reg = _case_inputs(case)
        per_head = {"m": tf.constant(logits[:, :3]), "b": tf.constant(logits[:, 3:])}
        spec = head.create_estimator_spec(
            features=features, mode=ModeKeys.EVAL, logits=per_head, labels=labels, regularization_losses=reg
        )
        with v1.Session() as sess:
            assert sess.run(spec.loss) == pytest.approx(case["eval"]["loss"], abs=1e-5)
            got = metric_values(sess, spec.eval_metric_ops)
    assert got == pytest.approx(case["eval"]["metrics"], abs=1e-5)
