"""Confusion counts: true/false positives/negatives, precision, recall, per-class
accuracy and mean IoU (tf.compat.v1.metrics' names and arguments).

Binary metrics read labels and predictions as booleans (non-zero is True), as TF casts
them. ``metrics_collections``, ``updates_collections`` and ``name`` are accepted for
compatibility and unused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxspec.metrics._shapes import broadcast_weights, check_same_shape, prepare
from jaxspec.metrics.base import Metric, apply_padding_mask, batch_constructor, is_concrete
from jaxspec.spec.fn_types import ArrayLike


class Count(Metric):
    """A weighted count (float32 scalar ``count``); ``compute`` returns it."""

    count: jax.Array

    def compute(self) -> jax.Array:
        return self.count


class TruePositives(Count):
    """State of ``true_positives``."""

    from_batch = batch_constructor("true_positives")


class FalsePositives(Count):
    """State of ``false_positives``."""

    from_batch = batch_constructor("false_positives")


class TrueNegatives(Count):
    """State of ``true_negatives``."""

    from_batch = batch_constructor("true_negatives")


class FalseNegatives(Count):
    """State of ``false_negatives``."""

    from_batch = batch_constructor("false_negatives")


class Precision(Metric):
    """State of ``precision``: weighted ``tp`` and ``fp`` (float32 scalars)."""

    tp: jax.Array
    fp: jax.Array

    from_batch = batch_constructor("precision")

    def compute(self) -> jax.Array:
        """``tp / (tp + fp)``, 0 when ``tp + fp`` is not positive (as TF)."""
        den = self.tp + self.fp
        return jnp.where(den > 0, self.tp / jnp.where(den > 0, den, 1.0), 0.0)


class Recall(Metric):
    """State of ``recall``: weighted ``tp`` and ``fn`` (float32 scalars)."""

    tp: jax.Array
    fn: jax.Array

    from_batch = batch_constructor("recall")

    def compute(self) -> jax.Array:
        """``tp / (tp + fn)``, 0 when ``tp + fn`` is not positive (as TF)."""
        den = self.tp + self.fn
        return jnp.where(den > 0, self.tp / jnp.where(den > 0, den, 1.0), 0.0)


def _binary_condition(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None,
    want_label: bool,
    want_pred: bool,
    what: str,
) -> jax.Array:
    """Weighted count of elements whose (label, prediction) booleans are the wanted pair."""
    labels, predictions, weights = prepare(
        jnp.asarray(labels) != 0, jnp.asarray(predictions) != 0, weights, f"{what}: labels and predictions"
    )
    hit = (labels == want_label) & (predictions == want_pred)
    w = broadcast_weights(weights, hit)
    return jnp.sum(jnp.where(hit, w, 0.0))


def true_positives(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> TruePositives:
    """Weighted count of elements with a true label and a true prediction
    (``tf.compat.v1.metrics.true_positives``).

    Args:
      labels, predictions: arrays of the same shape (a trailing size-1 axis on one side
        is squeezed), any dtype, read as booleans (non-zero is True).
      weights: None or weights broadcastable to ``predictions`` (rank 0 or the same rank,
        axes 1 or matching; a rank off by one is aligned on the last axis, as TF).

    Returns:
      A ``TruePositives`` state; value a float32 scalar.

    Raises:
      ValueError: shapes differ after squeezing; weights do not broadcast.
    """
    return TruePositives(_binary_condition(labels, predictions, weights, True, True, "true_positives"))


def false_positives(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> FalsePositives:
    """Weighted count of false labels predicted true (``tf.compat.v1.metrics.false_positives``).

    Args, returns and errors as ``true_positives``.
    """
    return FalsePositives(_binary_condition(labels, predictions, weights, False, True, "false_positives"))


def true_negatives(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> TrueNegatives:
    """Weighted count of false labels predicted false (``tf.compat.v1.metrics.true_negatives``).

    Args, returns and errors as ``true_positives``.
    """
    return TrueNegatives(_binary_condition(labels, predictions, weights, False, False, "true_negatives"))


def false_negatives(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> FalseNegatives:
    """Weighted count of true labels predicted false (``tf.compat.v1.metrics.false_negatives``).

    Args, returns and errors as ``true_positives``.
    """
    return FalseNegatives(_binary_condition(labels, predictions, weights, True, False, "false_negatives"))


def precision(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> Precision:
    """``tp / (tp + fp)`` over everything seen (``tf.compat.v1.metrics.precision``).

    Args as ``true_positives`` (labels and predictions read as booleans).

    Returns:
      A ``Precision`` state; value a float32 scalar, 0 when nothing was predicted true.

    Raises:
      ValueError: shapes differ after squeezing; weights do not broadcast.
    """
    return Precision(
        tp=_binary_condition(labels, predictions, weights, True, True, "precision"),
        fp=_binary_condition(labels, predictions, weights, False, True, "precision"),
    )


def recall(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> Recall:
    """``tp / (tp + fn)`` over everything seen (``tf.compat.v1.metrics.recall``).

    Args as ``true_positives``.

    Returns:
      A ``Recall`` state; value a float32 scalar, 0 when no label was true.

    Raises:
      ValueError: shapes differ after squeezing; weights do not broadcast.
    """
    return Recall(
        tp=_binary_condition(labels, predictions, weights, True, True, "recall"),
        fn=_binary_condition(labels, predictions, weights, True, False, "recall"),
    )


# -- multi-class: per-class accuracy and IoU -------------------------------------------------
def _class_inputs(
    labels: ArrayLike, predictions: ArrayLike, weights: ArrayLike | None, what: str
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Flat int32 labels and predictions, flat float32 weights (padding mask included)
    and the flat padding mask itself (1 for elements of real rows)."""
    labels, predictions = jnp.asarray(labels), jnp.asarray(predictions)
    if labels.size != predictions.size:
        check_same_shape(labels, predictions, f"{what}: labels and predictions")
    real = apply_padding_mask(labels, None).reshape(-1)  # 1 per real element, 0 for padded rows
    w = real
    if weights is not None:
        uw = jnp.asarray(weights, jnp.float32)
        uw = uw.reshape(-1) if uw.ndim > 1 else uw
        try:
            uw = jnp.broadcast_to(uw, w.shape)
        except ValueError as e:
            raise ValueError(
                f"{what}: weights of shape {tuple(jnp.shape(weights))} do not match {w.shape[0]} labels."
            ) from e
        w = w * uw
    return labels.reshape(-1).astype(jnp.int32), predictions.reshape(-1).astype(jnp.int32), w, real


def _out_of_range(ids: jax.Array, num_classes: int, real: jax.Array, what: str) -> jax.Array:
    """Count real elements whose id is outside ``[0, num_classes)``; on concrete inputs raise.

    Raises:
      ValueError: concrete inputs hold an id outside the range (TF fails at run time).
    """
    bad = (ids < 0) | (ids >= num_classes)
    if is_concrete(ids, real):
        b = np.asarray(bad) & (np.asarray(real) > 0)
        if b.any():
            raise ValueError(
                f"{what}: ids must be in [0, {num_classes}), got {np.asarray(ids)[b][:5].tolist()}."
            )
    return jnp.sum(jnp.where(bad, real, 0.0))


def _nan_if(invalid: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.where(invalid > 0, jnp.nan, value)


class MeanPerClassAccuracy(Metric):
    """State of ``mean_per_class_accuracy``: per class, weighted ``correct`` predictions
    and ``total`` labels (float32 ``[num_classes]``), and ``invalid`` (ids out of range)."""

    correct: jax.Array
    total: jax.Array
    invalid: jax.Array
    num_classes: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("mean_per_class_accuracy")

    def compute(self) -> jax.Array:
        """Mean over all ``num_classes`` of ``correct / total`` (0 for a class never seen,
        as TF); NaN if a label was out of range."""
        per_class = jnp.where(self.total > 0, self.correct / jnp.where(self.total > 0, self.total, 1.0), 0.0)
        return _nan_if(self.invalid, jnp.mean(per_class))


def mean_per_class_accuracy(
    labels: ArrayLike,
    predictions: ArrayLike,
    num_classes: int,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanPerClassAccuracy:
    """Accuracy per label class, averaged over the ``num_classes`` classes
    (``tf.compat.v1.metrics.mean_per_class_accuracy``). As in TF, a class that never
    appears as a label contributes an accuracy of 0 to the mean.

    Args:
      labels: int array ``[batch, ...]`` of ids in ``[0, num_classes)``; flattened.
      predictions: int array with as many elements (flattened); out-of-range predictions
        simply never match.
      num_classes: number of classes (a Python int).
      weights: None, a scalar, or an array with one weight per label (flattened).

    Returns:
      A ``MeanPerClassAccuracy`` state; value a float32 scalar.

    Raises:
      ValueError: shapes differ; weights do not match; concrete labels outside
        ``[0, num_classes)`` (TF raises InvalidArgumentError when run). Traced
        out-of-range labels make the value NaN.
    """
    num_classes = int(num_classes)
    labels, predictions, w, real = _class_inputs(labels, predictions, weights, "mean_per_class_accuracy")
    invalid = _out_of_range(labels, num_classes, real, "mean_per_class_accuracy labels")
    correct = jnp.where(predictions == labels, w, 0.0)
    index = jnp.where((labels >= 0) & (labels < num_classes), labels, num_classes)  # out of range: dropped
    zeros = jnp.zeros((num_classes,), jnp.float32)
    return MeanPerClassAccuracy(
        correct=zeros.at[index].add(correct, mode="drop"),
        total=zeros.at[index].add(w, mode="drop"),
        invalid=invalid,
        num_classes=num_classes,
    )


class MeanIoU(Metric):
    """State of ``mean_iou``: the weighted confusion matrix ``cm[label, prediction]``
    (float32 ``[num_classes, num_classes]``) and ``invalid`` (ids out of range)."""

    cm: jax.Array
    invalid: jax.Array
    num_classes: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("mean_iou")

    def compute(self) -> jax.Array:
        """Mean over classes with a non-zero denominator of ``cm[c, c] / (row + column -
        cm[c, c])``, 0 if there is none (as TF); NaN if an id was out of range."""
        diag = jnp.diagonal(self.cm)
        den = jnp.sum(self.cm, 0) + jnp.sum(self.cm, 1) - diag
        valid = jnp.sum((den != 0).astype(jnp.float32))
        iou = diag / jnp.where(den > 0, den, 1.0)
        value = jnp.where(valid > 0, jnp.sum(iou) / jnp.where(valid > 0, valid, 1.0), 0.0)
        return _nan_if(self.invalid, value)


def mean_iou(
    labels: ArrayLike,
    predictions: ArrayLike,
    num_classes: int,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanIoU:
    """Mean intersection-over-union over classes (``tf.compat.v1.metrics.mean_iou``).

    Args:
      labels, predictions: int arrays of the same shape with ids in ``[0, num_classes)``
        (flattened).
      num_classes: number of classes (a Python int).
      weights: None, a scalar, or one weight per element (flattened).

    Returns:
      A ``MeanIoU`` state; value a float32 scalar.

    Raises:
      ValueError: shapes differ; weights do not match; concrete ids outside
        ``[0, num_classes)`` (TF raises InvalidArgumentError when run). Traced
        out-of-range ids make the value NaN.
    """
    num_classes = int(num_classes)
    check_same_shape(jnp.asarray(labels), jnp.asarray(predictions), "mean_iou: labels and predictions")
    labels, predictions, w, real = _class_inputs(labels, predictions, weights, "mean_iou")
    invalid = _out_of_range(labels, num_classes, real, "mean_iou labels") + _out_of_range(
        predictions, num_classes, real, "mean_iou predictions"
    )
    ok = (labels >= 0) & (labels < num_classes) & (predictions >= 0) & (predictions < num_classes)
    flat = jnp.where(ok, labels * num_classes + predictions, num_classes * num_classes)
    cm = jnp.zeros((num_classes * num_classes,), jnp.float32).at[flat].add(w, mode="drop")
    return MeanIoU(cm=cm.reshape(num_classes, num_classes), invalid=invalid, num_classes=num_classes)
