"""Means: mean, mean_tensor, accuracy and the error metrics of tf.compat.v1.metrics.

Every function here reduces to a weighted mean ``sum(w * x) / sum(w)`` (elementwise for
``mean_tensor``), so its state is a ``Mean`` (or ``MeanTensor``) and merging is a sum.
``metrics_collections``, ``updates_collections`` and ``name`` are accepted everywhere for
compatibility and unused: JAX has no graph collections.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxspec.metrics._shapes import align_weights, broadcast_weights, check_same_shape, prepare, squeeze_pair
from jaxspec.metrics.base import Metric, active_padding_mask, batch_constructor, drop_padding
from jaxspec.spec.fn_types import ArrayLike


def _safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    """``num / den`` where ``den > 0``, else 0 (TF's ``div_no_nan(num, maximum(den, 0))``)."""
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def _mean_stats(values: ArrayLike, weights: ArrayLike | None) -> tuple[jax.Array, jax.Array]:
    """``(sum(w * x), sum(w))`` as tf.compat.v1.metrics.mean accumulates them (float32)."""
    values = jnp.asarray(values, jnp.float32)
    w = broadcast_weights(align_weights(weights, values), values)
    return jnp.sum(drop_padding(values) * w), jnp.sum(w)


class Mean(Metric):
    """State of a weighted mean: ``total = sum(w * x)``, ``count = sum(w)`` (float32 scalars)."""

    total: jax.Array
    count: jax.Array

    from_batch = batch_constructor("mean")

    def compute(self) -> jax.Array:
        """``total / count``, or 0 when ``count`` is not positive (as TF's mean)."""
        return _safe_div(self.total, self.count)


class Accuracy(Mean):
    """State of ``accuracy``: a Mean of per-element matches."""

    from_batch = batch_constructor("accuracy")


class MeanAbsoluteError(Mean):
    """State of ``mean_absolute_error``: a Mean of ``|predictions - labels|``."""

    from_batch = batch_constructor("mean_absolute_error")


class MeanSquaredError(Mean):
    """State of ``mean_squared_error``: a Mean of ``(labels - predictions)**2``."""

    from_batch = batch_constructor("mean_squared_error")


class RootMeanSquaredError(Mean):
    """State of ``root_mean_squared_error``; ``compute`` is the square root of the mean."""

    from_batch = batch_constructor("root_mean_squared_error")

    def compute(self) -> jax.Array:
        return jnp.sqrt(super().compute())


class MeanRelativeError(Mean):
    """State of ``mean_relative_error``: a Mean of ``|labels - predictions| / normalizer``."""

    from_batch = batch_constructor("mean_relative_error")


class PercentageBelow(Mean):
    """State of ``percentage_below``: a Mean of ``values < threshold``."""

    from_batch = batch_constructor("percentage_below")


class MeanCosineDistance(Mean):
    """State of ``mean_cosine_distance`` (static ``dim``); ``compute`` is ``1 - mean``."""

    dim: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("mean_cosine_distance")

    def compute(self) -> jax.Array:
        return 1.0 - super().compute()


class MeanTensor(Metric):
    """State of ``mean_tensor``: elementwise ``total`` and ``count`` of the values' shape."""

    total: jax.Array
    count: jax.Array

    from_batch = batch_constructor("mean_tensor")

    def compute(self) -> jax.Array:
        """Elementwise ``total / count`` (0 where ``count`` is not positive)."""
        return _safe_div(self.total, self.count)


def mean(
    values: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> Mean:
    """Weighted mean of ``values`` (``tf.compat.v1.metrics.mean``).

    Args:
      values: numeric array of any shape (cast to float32); every element counts.
      weights: None, or float weights whose rank is 0 or that of ``values`` (a rank off
        by one is squeezed/expanded on the last axis, as TF) and whose axes are 1 or
        match ``values``; 0 drops an element.

    Returns:
      A ``Mean`` state for this batch; the merged value is ``sum(w * x) / sum(w)`` over
      everything seen, a float32 scalar, or 0 when the total weight is not positive.

    Raises:
      ValueError: weights cannot be broadcast to values.
    """
    total, count = _mean_stats(values, weights)
    return Mean(total=total, count=count)


def accuracy(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> Accuracy:
    """Fraction of ``predictions`` equal to ``labels`` (``tf.compat.v1.metrics.accuracy``).

    Args:
      labels: array ``[batch, ...]`` of class ids (any dtype).
      predictions: array of the same shape; a trailing axis of size 1 on one side is
        squeezed, and predictions are cast to ``labels``' dtype before comparing, as TF.
      weights: None or weights broadcastable to ``labels`` (see ``mean``).

    Returns:
      An ``Accuracy`` state (a Mean of the per-element matches); value float32 in [0, 1].

    Raises:
      ValueError: labels and predictions have different shapes after squeezing, or the
        weights do not broadcast.
    """
    labels, predictions, weights = prepare(labels, predictions, weights, "accuracy: labels and predictions")
    correct = (predictions.astype(labels.dtype) == labels).astype(jnp.float32)
    return Accuracy(*_mean_stats(correct, weights))


def _errors_input(
    labels: ArrayLike, predictions: ArrayLike, weights: ArrayLike | None, what: str
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    labels, predictions, weights = prepare(labels, predictions, weights, f"{what}: labels and predictions")
    return labels.astype(jnp.float32), predictions.astype(jnp.float32), weights


def mean_absolute_error(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanAbsoluteError:
    """Weighted mean of ``|predictions - labels|`` (``tf.compat.v1.metrics.mean_absolute_error``).

    Args:
      labels, predictions: float arrays of the same shape (a trailing size-1 axis on one
        side is squeezed); computed in float32.
      weights: None or weights broadcastable to ``predictions`` (see ``mean``).

    Returns:
      A ``MeanAbsoluteError`` state; value a float32 scalar.

    Raises:
      ValueError: shapes differ, or weights do not broadcast.
    """
    labels, predictions, weights = _errors_input(labels, predictions, weights, "mean_absolute_error")
    return MeanAbsoluteError(*_mean_stats(jnp.abs(predictions - labels), weights))


def mean_squared_error(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanSquaredError:
    """Weighted mean of ``(labels - predictions)**2`` (``tf.compat.v1.metrics.mean_squared_error``).

    Args and errors as ``mean_absolute_error``. Returns a ``MeanSquaredError`` state.
    """
    labels, predictions, weights = _errors_input(labels, predictions, weights, "mean_squared_error")
    return MeanSquaredError(*_mean_stats(jnp.square(labels - predictions), weights))


def root_mean_squared_error(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> RootMeanSquaredError:
    """Square root of the weighted mean squared error, taken once at the end
    (``tf.compat.v1.metrics.root_mean_squared_error``).

    Args and errors as ``mean_absolute_error``. Returns a ``RootMeanSquaredError`` state.
    """
    labels, predictions, weights = _errors_input(labels, predictions, weights, "root_mean_squared_error")
    return RootMeanSquaredError(*_mean_stats(jnp.square(labels - predictions), weights))


def mean_relative_error(
    labels: ArrayLike,
    predictions: ArrayLike,
    normalizer: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanRelativeError:
    """Weighted mean of ``|labels - predictions| / normalizer``, with 0 where the
    normalizer is 0 (``tf.compat.v1.metrics.mean_relative_error``).

    Args:
      labels, predictions: float arrays of the same shape (squeezed as TF).
      normalizer: float array of ``predictions``' shape (a trailing size-1 axis on one of
        the two is squeezed, as TF).
      weights: None or weights broadcastable to ``predictions``.

    Returns:
      A ``MeanRelativeError`` state; value a float32 scalar.

    Raises:
      ValueError: labels, predictions and normalizer shapes differ; weights do not
        broadcast.
    """
    labels, predictions, weights = _errors_input(labels, predictions, weights, "mean_relative_error")
    predictions, normalizer = squeeze_pair(predictions, jnp.asarray(normalizer, jnp.float32))
    check_same_shape(predictions, normalizer, "mean_relative_error: predictions and normalizer")
    relative = jnp.where(normalizer == 0.0, 0.0, jnp.abs(labels - predictions) / normalizer)
    return MeanRelativeError(*_mean_stats(relative, weights))


def mean_cosine_distance(
    labels: ArrayLike,
    predictions: ArrayLike,
    dim: int,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanCosineDistance:
    """``1 - mean(sum(labels * predictions, axis=dim))``: the cosine distance of unit-norm
    vectors (``tf.compat.v1.metrics.mean_cosine_distance``; inputs are not normalised).

    Args:
      labels, predictions: float arrays of the same shape, e.g. ``[batch, d]``, already
        unit-normalised along ``dim``.
      dim: the axis of the vectors (an int; not the batch axis 0 during evaluation).
      weights: None or weights broadcastable to the reduced shape (``dim`` kept as size 1),
        e.g. ``[batch]`` or ``[batch, 1]`` for ``[batch, d]`` inputs.

    Returns:
      A ``MeanCosineDistance`` state; value a float32 scalar.

    Raises:
      ValueError: shapes differ; weights do not broadcast; ``dim`` is the batch axis while
        a padding mask is active.
    """
    labels, predictions, weights = _errors_input(labels, predictions, weights, "mean_cosine_distance")
    axis = dim % predictions.ndim if predictions.ndim else 0
    if axis == 0 and active_padding_mask() is not None:
        raise ValueError("mean_cosine_distance: dim must not be the batch axis 0 during evaluation.")
    radial = jnp.sum(drop_padding(predictions * labels), axis=dim, keepdims=True)
    return MeanCosineDistance(*_mean_stats(radial, weights), dim=int(dim))


def percentage_below(
    values: ArrayLike,
    threshold: float,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> PercentageBelow:
    """Weighted fraction of ``values`` strictly below ``threshold``
    (``tf.compat.v1.metrics.percentage_below``).

    Args:
      values: numeric array of any shape.
      threshold: scalar (Python number or array).
      weights: None or weights broadcastable to ``values`` (see ``mean``).

    Returns:
      A ``PercentageBelow`` state; value a float32 scalar in [0, 1].

    Raises:
      ValueError: weights do not broadcast.
    """
    below = (jnp.asarray(values) < threshold).astype(jnp.float32)
    return PercentageBelow(*_mean_stats(below, weights))


def mean_tensor(
    values: ArrayLike,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> MeanTensor:
    """Elementwise weighted mean over batches (``tf.compat.v1.metrics.mean_tensor``).

    Every batch must have the same shape (as TF's variables do); the result has that
    shape. During evaluation padded rows count 0 at their positions.

    Args:
      values: numeric array (cast to float32).
      weights: None or weights broadcastable to ``values`` (see ``mean``).

    Returns:
      A ``MeanTensor`` state; value float32 of ``values``' shape, 0 where nothing counted.

    Raises:
      ValueError: weights do not broadcast; merging states of different shapes.
    """
    values = jnp.asarray(values, jnp.float32)
    w = broadcast_weights(align_weights(weights, values), values)
    return MeanTensor(total=drop_padding(values) * w, count=w)
