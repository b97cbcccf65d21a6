"""Input checks and loss arithmetic of jaxspec's heads on JAX arrays, as tf.estimator
2.15's heads do them: static shapes checked when traced (ValueError naming the argument
and both shapes; the shape rules and the argument checks are ``jaxspec.rules.head_args``',
shared with tf_bridge's heads), values checked where they are concrete."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec.rules import head_args as rules
from jaxspec.rules.head_keys import Reduction
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

_SPARSE = ("BCOO", "BCSR", "SparseTensor", "SparseTensorValue")


def is_concrete(*trees: PyTree) -> bool:
    """True when no leaf of ``trees`` is a tracer (its values can be read on the host)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees))


def _shape(x: ArrayLike) -> tuple[int, ...]:
    return tuple(np.shape(x))


def call_loss_fn(
    loss_fn: Callable[..., ArrayLike], labels: Array, logits: Array, features: PyTree, expected_loss_dim: int
) -> jax.Array:
    """``loss_fn(labels=, logits=[, features=])``, checked to be ``logits.shape[:-1] +
    (expected_loss_dim,)`` (ValueError naming both shapes otherwise)."""
    kwargs = {"features": features} if "features" in rules.fn_args(loss_fn) else {}
    loss = jnp.asarray(loss_fn(labels=labels, logits=logits, **kwargs))
    rules.check_loss_shape(_shape(loss), _shape(logits), expected_loss_dim)
    return loss


def check_logits(logits: ArrayLike, expected_dim: int) -> Array:
    """Logits as float32 ``[D0, ..., DN, expected_dim]`` (rank >= 2), else ValueError."""
    if logits is None:
        raise ValueError("logits is required, got None.")
    rules.check_logits_shape(_shape(logits), expected_dim)
    return jnp.asarray(logits, jnp.float32)


def check_labels(labels: object, logits: Array, expected_dim: int) -> Array | np.ndarray:
    """Labels of shape ``logits.shape[:-1] + (expected_dim,)``; labels one rank short are
    given a trailing axis first. The dtype is kept (numpy string labels stay numpy).

    Raises:
      ValueError: labels is None, sparse, of rank < 2, or of another shape (the message
        gives the expected and the actual shape).
    """
    rules.check_labels_present(labels, expected_dim, type(labels).__name__ in _SPARSE)
    array = labels if isinstance(labels, (jax.Array, np.ndarray)) else np.asarray(labels)
    if rules.labels_need_last_axis(_shape(array), _shape(logits)):
        array = array[..., None]
    rules.check_labels_shape(_shape(array), _shape(logits), expected_dim)
    return array


def label_ids_from_vocabulary(labels: Array | np.ndarray, vocabulary: Sequence[str]) -> Array | np.ndarray:
    """String labels (numpy, concrete) to their index in ``vocabulary`` (ValueError naming
    those absent from it, where TF's lookup gives -1 and its range check fails); integer
    labels are taken as ids already (JAX arrays hold no strings, so labels inside a
    compiled step arrive as ids)."""
    if isinstance(labels, np.ndarray) and labels.dtype.kind in ("U", "S", "O"):
        table = {str(v): i for i, v in enumerate(vocabulary)}
        decoded = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[object])(
            labels
        )
        unknown = sorted({s for s in decoded.ravel() if s not in table})
        if unknown:
            raise ValueError(f"labels {unknown} are not in label_vocabulary {list(vocabulary)}.")
        return np.vectorize(table.__getitem__, otypes=[np.int32])(decoded)
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise ValueError(
            "with a label_vocabulary, labels must be strings (numpy) or integer ids into the "
            f"vocabulary, got dtype {labels.dtype}."
        )
    return labels


def labels_in_range(labels: ArrayLike, n_classes: int, message: str | None = None) -> Array | None:
    """Check ``0 <= labels < n_classes``. Concrete labels: ValueError when outside (TF's
    eager check). Traced labels: return a boolean scalar (True when all are in range),
    which the head turns into a NaN loss, since a compiled step cannot raise."""
    if is_concrete(labels):
        values = np.asarray(labels)
        if values.size and values.max() > n_classes - 1:
            raise ValueError(
                message or f"labels must be <= n_classes - 1 = {n_classes - 1}, got {values.max()}."
            )
        if values.size and values.min() < 0:
            raise ValueError(message or f"labels must be >= 0, got {values.min()}.")
        return None
    labels = jnp.asarray(labels)
    return jnp.all((labels >= 0) & (labels <= n_classes - 1))


def get_weights(
    features: PyTree, weight_column: str | None, logits: Array, allow_per_logit_weights: bool = False
) -> ArrayLike:
    """The example weights from ``features[weight_column]`` as float32 ``[D0, ..., DN, 1]``
    (``[D0, ..., DN, logits_dimension]`` too when ``allow_per_logit_weights``), or 1.0
    without a weight column.

    Raises:
      TypeError: weight_column is not a string (TF also takes a NumericColumn, a TF object).
      ValueError: features has no such key, the weights are not numeric, or their shape
        does not match logits (both shapes named).
    """
    if weight_column is None:
        return 1.0
    if not isinstance(weight_column, str):
        raise TypeError(
            f"weight_column must be a string (a features key), got {type(weight_column).__name__}."
        )
    if not isinstance(features, dict) or weight_column not in features:
        keys = sorted(features) if isinstance(features, dict) else type(features).__name__
        raise ValueError(f"weight_column {weight_column!r} is not in features (keys: {keys}).")
    weights = features[weight_column]
    if not hasattr(weights, "dtype"):
        weights = np.asarray(weights)
    kind = np.dtype(weights.dtype).kind if str(weights.dtype) != "bfloat16" else "f"
    if kind not in ("f", "i", "u", "b"):
        raise ValueError(
            f"weight column {weight_column!r} must be castable to float, got dtype {weights.dtype}."
        )
    weights = jnp.asarray(weights, jnp.float32)
    if rules.labels_need_last_axis(_shape(weights), _shape(logits)):
        weights = weights[..., None]
    rules.check_weights_shape(_shape(weights), _shape(logits), allow_per_logit_weights)
    return weights


def reduce_weighted_loss(unweighted_loss: Array, weights: ArrayLike, reduction: str) -> Array:
    """Keras' ``compute_weighted_loss``: ``loss * weights`` summed (SUM) or summed and divided
    by its number of elements (SUM_OVER_BATCH_SIZE, AUTO); float32 scalar."""
    weighted = jnp.asarray(unweighted_loss, jnp.float32) * jnp.asarray(weights, jnp.float32)
    total = jnp.sum(weighted)
    if reduction == Reduction.SUM:
        return total
    return total / weighted.size if weighted.size else jnp.zeros((), jnp.float32)


def add_regularization(loss: Array, regularization_losses: Sequence[ArrayLike] | None) -> Array:
    """``loss + sum(regularization_losses)`` (the list may be None)."""
    if regularization_losses is None:
        return loss
    return loss + sum_regularization(regularization_losses)


def sum_regularization(regularization_losses: Sequence[ArrayLike]) -> Array:
    """The sum of the scalar regularization losses, float32."""
    return sum((jnp.asarray(r, jnp.float32) for r in regularization_losses), jnp.zeros((), jnp.float32))


def nan_unless(ok: jax.Array | None, value: jax.Array) -> jax.Array:
    """``value``, or NaN where a traced check ``ok`` failed."""
    return value if ok is None else jnp.where(ok, value, jnp.nan)
