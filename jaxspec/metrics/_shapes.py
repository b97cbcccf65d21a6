"""TensorFlow's shape rules for metric inputs (squeezable dimensions, weight broadcasting).

These follow ``tf.compat.v1.metrics``' static-shape checks: the same inputs are accepted
and the same ones raise ValueError (with our wording).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxspec.metrics.base import apply_padding_mask
from jaxspec.spec.fn_types import ArrayLike


def squeeze_pair(labels: jax.Array, predictions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Drop a trailing size-1 axis from whichever of the two has one more axis (as TF's
    ``confusion_matrix.remove_squeezable_dimensions``)."""
    diff = predictions.ndim - labels.ndim
    if diff == 1 and predictions.shape[-1] == 1:
        predictions = predictions[..., 0]
    elif diff == -1 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    return labels, predictions


def check_same_shape(a: jax.Array, b: jax.Array, what: str) -> None:
    """Raise ValueError naming ``what`` when the two shapes differ."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{what}: shapes {tuple(a.shape)} and {tuple(b.shape)} are incompatible.")


def align_weights(weights: ArrayLike | None, predictions: jax.Array) -> jax.Array | None:
    """Squeeze or expand the last axis of ``weights`` when its rank differs from
    ``predictions``' by one (scalars stay scalars), as TF does before broadcasting.

    Raises:
      ValueError: the squeezed axis does not have size 1.
    """
    if weights is None:
        return None
    w = jnp.asarray(weights, jnp.float32)
    if w.ndim == 0:
        return w
    if w.ndim - predictions.ndim == 1:
        if w.shape[-1] != 1:
            raise ValueError(
                f"weights of shape {tuple(w.shape)}: cannot squeeze a last axis of size {w.shape[-1]}."
            )
        w = w[..., 0]
    elif predictions.ndim - w.ndim == 1:
        w = w[..., None]
    return w


def check_broadcastable(weights: jax.Array, values: jax.Array) -> None:
    """TF's ``assert_broadcastable``: weights are a scalar, or have ``values``' rank with
    every axis 1 or equal to ``values``' axis.

    Raises:
      ValueError: otherwise.
    """
    if weights.ndim == 0:
        return
    ok = weights.ndim == values.ndim and all(
        w in (1, v) for w, v in zip(weights.shape, values.shape, strict=True)
    )
    if not ok:
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} cannot be broadcast to values of shape "
            f"{tuple(values.shape)}: give a scalar or an array of the same rank whose axes are 1 or match."
        )


def broadcast_weights(weights: ArrayLike | None, values: jax.Array) -> jax.Array:
    """float32 weights of ``values``' shape (TF's ``broadcast_weights``) times the padding
    mask; None means 1.

    Raises:
      ValueError: weights are not broadcastable under TF's rule (see
        ``check_broadcastable``).
    """
    if weights is not None:
        weights = jnp.asarray(weights, jnp.float32)
        check_broadcastable(weights, values)
    return apply_padding_mask(values, weights)


def prepare(
    labels: ArrayLike, predictions: ArrayLike, weights: ArrayLike | None, what: str
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """TF's ``_remove_squeezable_dimensions``: squeeze labels/predictions, check they have
    the same shape, align the weights' rank. Returns ``(labels, predictions, weights)``.

    Raises:
      ValueError: shapes differ after squeezing, or weights cannot be aligned.
    """
    labels, predictions = squeeze_pair(jnp.asarray(labels), jnp.asarray(predictions))
    check_same_shape(labels, predictions, what)
    return labels, predictions, align_weights(weights, predictions)
