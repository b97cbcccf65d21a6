"""mean and accuracy, with tf.compat.v1.metrics' arguments and results."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxspec.metrics.base import Metric, apply_padding_mask


class Mean(Metric):
    """State of a weighted mean: ``total = sum(w * x)``, ``count = sum(w)``."""

    total: jax.Array
    count: jax.Array

    def compute(self) -> jax.Array:
        """``total / count``, or 0 when ``count`` is 0 (as TensorFlow's mean)."""
        return jnp.where(self.count > 0, self.total / jnp.where(self.count > 0, self.count, 1.0), 0.0)


def mean(
    values: Any,
    weights: Any = None,
    metrics_collections: Any = None,
    updates_collections: Any = None,
    name: str | None = None,
) -> Mean:
    """Weighted mean of ``values`` (``tf.compat.v1.metrics.mean``).

    Args:
      values: numeric array of any shape; every element counts.
      weights: None, or an array broadcastable to ``values`` (0 drops an element).
      metrics_collections, updates_collections, name: accepted for compatibility; unused
        (JAX has no graph collections).

    Returns:
      A ``Mean`` state for this batch; the eval loop merges the states of all batches
      and the value is ``sum(w * x) / sum(w)`` over everything seen (0 if no weight).

    Raises:
      ValueError: weights cannot be broadcast to values.
    """
    values = jnp.asarray(values, jnp.float32)
    w = apply_padding_mask(values, weights)
    return Mean(total=jnp.sum(values * w), count=jnp.sum(w))


def accuracy(
    labels: Any,
    predictions: Any,
    weights: Any = None,
    metrics_collections: Any = None,
    updates_collections: Any = None,
    name: str | None = None,
) -> Mean:
    """Fraction of ``predictions`` equal to ``labels`` (``tf.compat.v1.metrics.accuracy``).

    Args:
      labels: array ``[batch, ...]`` of class ids (any dtype).
      predictions: array of the same shape (cast to ``labels``' dtype, as TF does).
      weights: None or an array broadcastable to ``labels``.

    Returns:
      A ``Mean`` state of the per-element matches.

    Raises:
      ValueError: labels and predictions have different shapes (after dropping a
        trailing dimension of size 1 on one side, as TF does).
    """
    labels = jnp.asarray(labels)
    predictions = jnp.asarray(predictions)
    if predictions.ndim == labels.ndim + 1 and predictions.shape[-1] == 1:
        predictions = predictions[..., 0]
    elif labels.ndim == predictions.ndim + 1 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    if labels.shape != predictions.shape:
        raise ValueError(
            f"accuracy: labels of shape {tuple(labels.shape)} and predictions of shape "
            f"{tuple(predictions.shape)} differ."
        )
    correct = (predictions.astype(labels.dtype) == labels).astype(jnp.float32)
    return mean(correct, weights)
