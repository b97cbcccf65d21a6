"""The eval metrics of tf.estimator 2.15's heads as jaxspec metric states.

TF 2.15's heads use Keras metrics (``tf.keras.metrics.Mean``, ``Accuracy``,
``Precision``, ``Recall``, ``BinaryAccuracy``, ``AUC``), not ``tf.compat.v1.metrics``; the
counts are the same, but Keras' AUC has no 1e-6 smoothing of the rates and sums the PR
curve by interpolation, so ``KerasAUC`` computes Keras' value from jaxspec's AUC counts.
Every state here merges by summing, so the mesh and the batching do not change the value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import jax
import jax.numpy as jnp

from jaxspec import metrics
from jaxspec.metrics.base import padding_mask_scope
from jaxspec.spec.fn_types import ArrayLike

M = TypeVar("M", bound=metrics.Metric)


def empty_states(build: Callable[[], dict[str, M]]) -> dict[str, M]:
    """The states ``build()`` gives, zeroed: the empty metrics of a head. Built with no
    padding mask, since only their shapes matter (inside an EVAL trace the mask's batch
    is not the dummy batch's)."""
    with padding_mask_scope(None):
        return jax.tree.map(jnp.zeros_like, build())


def _div_no_nan(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.where(b != 0, a / jnp.where(b != 0, b, 1.0), 0.0)


def _pr_auc_interpolated(tp: jax.Array, fp: jax.Array, fn: jax.Array) -> jax.Array:
    """Area under the PR curve with precision interpolated linearly in the predicted
    positives between thresholds (Davis & Goadrich), as Keras' AUC(curve='PR')."""
    p = tp + fp
    dtp = tp[:-1] - tp[1:]
    slope = _div_no_nan(dtp, jnp.maximum(p[:-1] - p[1:], 0.0))
    intercept = tp[1:] - slope * p[1:]
    positive = (p[:-1] > 0) & (p[1:] > 0)
    ratio = jnp.where(positive, _div_no_nan(p[:-1], jnp.maximum(p[1:], 0.0)), 1.0)
    return jnp.sum(_div_no_nan(slope * (dtp + intercept * jnp.log(ratio)), jnp.maximum(tp[1:] + fn[1:], 0.0)))


class KerasAUC(metrics.AUC):
    """An AUC state (counts at 200 thresholds, as ``tf.keras.metrics.AUC()``) whose value
    is Keras': ROC by the trapezoidal rule on unsmoothed rates, PR by interpolation."""

    def compute(self) -> jax.Array:
        tp, fn, tn, fp = self.tp, self.fn, self.tn, self.fp
        if self.curve == "PR":
            value = _pr_auc_interpolated(tp, fp, fn)
        else:
            x, y = _div_no_nan(fp, fp + tn), _div_no_nan(tp, tp + fn)
            value = jnp.sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2.0)
        return self._checked(value)


def keras_auc(labels: ArrayLike, predictions: ArrayLike, weights: ArrayLike, curve: str = "ROC") -> KerasAUC:
    """The state of ``tf.keras.metrics.AUC(curve=curve)`` updated with one batch (labels
    read as booleans, predictions in [0, 1], weights broadcast to predictions)."""
    labels = jnp.asarray(labels, jnp.float32)
    predictions = jnp.asarray(predictions, jnp.float32)
    w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), predictions.shape)
    state = metrics.auc(labels, predictions, weights=w, num_thresholds=200, curve=curve)
    return KerasAUC(**{f.name: getattr(state, f.name) for f in dataclasses.fields(state)})


class AccuracyBaseline(metrics.Metric):
    """``accuracy_baseline``: the accuracy of always predicting the majority label,
    ``max(label_mean, 1 - label_mean)``, from the weighted label sum and weight."""

    total: jax.Array
    count: jax.Array

    def compute(self) -> jax.Array:
        return _div_no_nan(jnp.maximum(self.total, self.count - self.total), self.count)


def accuracy_baseline(label_mean: metrics.Mean) -> AccuracyBaseline:
    """The baseline state of the labels whose ``label/mean`` state is ``label_mean``."""
    return AccuracyBaseline(total=label_mean.total, count=label_mean.count)


def broadcast_mean(values: ArrayLike, weights: ArrayLike) -> metrics.Mean:
    """``tf.keras.metrics.Mean`` updated with ``values`` and weights broadcast to them."""
    values = jnp.asarray(values, jnp.float32)
    w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), values.shape)
    return metrics.mean(values, w)


def binary_accuracy(
    labels: ArrayLike, probabilities: ArrayLike, weights: ArrayLike, threshold: float
) -> metrics.Accuracy:
    """``tf.keras.metrics.BinaryAccuracy(threshold=t)``: labels against ``p > t``."""
    predicted = (jnp.asarray(probabilities, jnp.float32) > threshold).astype(jnp.float32)
    labels = jnp.asarray(labels, jnp.float32)
    return metrics.accuracy(
        labels, predicted, jnp.broadcast_to(jnp.asarray(weights, jnp.float32), labels.shape)
    )


def precision_recall_at(
    labels: ArrayLike, scores: ArrayLike, weights: ArrayLike, threshold: float
) -> tuple[metrics.Precision, metrics.Recall]:
    """``tf.keras.metrics.Precision/Recall(thresholds=t)``: positive when ``score > t``."""
    positive = jnp.asarray(scores, jnp.float32) > threshold
    labels = jnp.asarray(labels) != 0
    w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), positive.shape)
    return metrics.precision(labels, positive, w), metrics.recall(labels, positive, w)


def regularization_mean(regularization_loss: jax.Array) -> metrics.Mean:
    """``regularization_loss``: a Mean of the batch's regularization loss (one value per
    row on the mesh, where it arrives gathered; a scalar off it)."""
    return metrics.mean(jnp.asarray(regularization_loss, jnp.float32))
