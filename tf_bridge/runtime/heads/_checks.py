"""Input checks of tf_bridge's heads on TF tensors: logits, labels, weights, label ranges,
``loss_fn``'s output; and the weighted loss. What static shapes decide and the argument
checks are ``jaxspec.rules.head_args``' (shared with jaxspec's heads); tf.estimator's
rules and exception types:

- in eager mode, and in graph mode wherever static shapes decide it, a bad shape or
  dtype is a ValueError raised now;
- in graph mode, what only the values or the unknown sizes decide is an assertion in the
  graph that fails with ``tf.errors.InvalidArgumentError`` when it runs.

Every message names the argument and the shapes it saw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from jaxspec.rules import head_args as rules
from jaxspec.rules.head_args import fn_args
from jaxspec.rules.head_keys import Reduction

# tf.estimator's loss reductions are Keras's (tf.keras.losses.Reduction in TF <= 2.15,
# tf_keras.losses.Reduction today): the same strings as ``Reduction``.
REDUCTION_SUM_OVER_BATCH_SIZE = Reduction.SUM_OVER_BATCH_SIZE


def _shape(t: Any) -> tuple[Any, ...] | None:
    return None if t.shape.rank is None else tuple(t.shape.as_list())


def check_logits(logits: Any, logits_dimension: int) -> tf.Tensor:
    """``logits`` as float32 ``[D0, ..., DN, logits_dimension]``."""
    logits = tf.cast(tf.convert_to_tensor(logits), tf.float32)
    if rules.check_logits_shape(_shape(logits), logits_dimension):
        return logits
    if tf.executing_eagerly():
        return logits
    with tf.control_dependencies(
        [
            tf.debugging.assert_rank_at_least(logits, 2, message="logits must have rank >= 2"),
            tf.debugging.assert_equal(
                tf.shape(logits)[-1],
                logits_dimension,
                message=f"logits' last dimension must be the head's logits_dimension {logits_dimension}",
            ),
        ]
    ):
        return tf.identity(logits)


def check_labels(labels: Any, logits: tf.Tensor, expected_dim: int) -> tf.Tensor:
    """Dense ``labels`` of shape ``logits.shape[:-1] + [expected_dim]``; labels one rank
    below logits get a last dimension of 1 (tf.estimator's rule).

    Raises:
      ValueError: labels None or sparse, rank < 2, a wrong last dimension, or (static
        shapes) other dimensions unlike logits'.
      tf.errors.InvalidArgumentError: (graph mode, unknown sizes) at run time, for the same.
    """
    rules.check_labels_present(
        labels, expected_dim, isinstance(labels, (tf.SparseTensor, tf.compat.v1.SparseTensorValue))
    )
    labels = tf.convert_to_tensor(labels)
    if rules.labels_need_last_axis(_shape(labels), _shape(logits)):
        labels = tf.expand_dims(labels, -1)
    if rules.check_labels_shape(_shape(labels), _shape(logits), expected_dim):
        return labels
    if tf.executing_eagerly():
        return labels
    expected_t = tf.concat([tf.shape(logits)[:-1], [expected_dim]], axis=0)
    with tf.control_dependencies(
        [
            tf.debugging.assert_equal(
                tf.shape(labels),
                expected_t,
                message=f"labels shape must be logits' batch shape + [{expected_dim}]",
                summarize=8,
            )
        ]
    ):
        return tf.identity(labels)


def check_label_range(labels: tf.Tensor, n_classes: int, message: str | None = None) -> tf.Tensor:
    """``labels`` whose values lie in ``[0, n_classes - 1]``.

    Raises:
      ValueError: (eager) a value outside.
      tf.errors.InvalidArgumentError: (graph) when the graph runs with a value outside.
    """
    what = message or f"labels must be class ids in [0, {n_classes - 1}]"
    if tf.executing_eagerly():
        values = labels.numpy()
        if (values > n_classes - 1).any() or (values < 0).any():
            raise ValueError(f"{what}; got values from {values.min()} to {values.max()}.")
        return labels
    upper = tf.debugging.assert_less_equal(labels, tf.cast(n_classes - 1, labels.dtype), message=what)
    lower = tf.debugging.assert_non_negative(labels, message=what)
    with tf.control_dependencies([upper, lower]):
        return tf.identity(labels)


def _weight_tensor(features: Any, weight_column: Any) -> tf.Tensor:
    if isinstance(weight_column, str):
        key, normalizer = weight_column, None
    elif (
        hasattr(weight_column, "key")
        and hasattr(weight_column, "normalizer_fn")
        and hasattr(weight_column, "shape")
    ):
        key, normalizer = weight_column.key, weight_column.normalizer_fn  # tf.feature_column.numeric_column
    else:
        raise TypeError(
            f"weight_column must be a str or a tf.feature_column.numeric_column; got {type(weight_column).__name__}."
        )
    if not isinstance(features, Mapping) or key not in features:
        have = sorted(features) if isinstance(features, Mapping) else type(features).__name__
        raise ValueError(f"weight_column {key!r} is not in features (features has {have}).")
    weights = tf.convert_to_tensor(features[key])
    if isinstance(weights, tf.SparseTensor):
        raise ValueError(f"weight_column {key!r}: weights must be dense, not a SparseTensor.")
    if normalizer is not None:
        weights = normalizer(weights)
    if not (weights.dtype.is_floating or weights.dtype.is_integer or weights.dtype.is_bool):
        raise tf.errors.UnimplementedError(
            None,
            None,
            f"weight_column {key!r}: weights of dtype {weights.dtype.name} cannot be cast to float32.",
        )
    return tf.cast(weights, tf.float32)


def weights_for(features: Any, weight_column: Any, logits: tf.Tensor, per_logit: bool = False) -> Any:
    """The example weights, float32 ``[D0, ..., DN, 1]`` (or ``logits``' shape with
    ``per_logit``); 1.0 without a weight column. Weights one rank below logits get a last
    dimension of 1.

    Raises:
      ValueError: the column is missing from features, or (static shapes) weights of
        another shape.
      TypeError: weight_column neither a str nor a numeric column.
      tf.errors.UnimplementedError: weights of a dtype that is not numeric (TF's type for
        a failed cast).
      tf.errors.InvalidArgumentError: (graph mode, unknown sizes) a wrong shape, at run time.
    """
    if weight_column is None:
        return 1.0
    weights = _weight_tensor(features, weight_column)
    allowed = "[D0, ..., DN] or [D0, ..., DN, 1]" + (", or logits' shape" if per_logit else "")
    if rules.labels_need_last_axis(_shape(weights), _shape(logits)):
        weights = tf.expand_dims(weights, -1)
    if rules.check_weights_shape(_shape(weights), _shape(logits), per_logit):
        return weights
    if tf.executing_eagerly():
        return weights
    w_shape, l_shape = tf.shape(weights), tf.shape(logits)
    one = tf.concat([l_shape[:-1], [1]], axis=0)
    ok = tf.reduce_all(tf.equal(w_shape, one)) if w_shape.shape == one.shape else tf.constant(False)
    if per_logit:
        same = (
            tf.reduce_all(tf.equal(w_shape, l_shape))
            if w_shape.shape == l_shape.shape
            else tf.constant(False)
        )
        ok = tf.logical_or(ok, same)
    check = tf.debugging.Assert(
        ok, [f"weights must have shape {allowed}; weights, logits:", w_shape, l_shape]
    )
    with tf.control_dependencies([check]):
        return tf.identity(weights)


def call_loss_fn(
    loss_fn: Callable[..., Any], labels: tf.Tensor, logits: tf.Tensor, features: Any, expected_dim: int
) -> tf.Tensor:
    """``loss_fn(labels=, logits=[, features=])``, checked to be ``logits.shape[:-1] + [expected_dim]``."""
    kwargs = {"features": features} if "features" in fn_args(loss_fn) else {}
    loss = tf.convert_to_tensor(loss_fn(labels=labels, logits=logits, **kwargs))
    if rules.check_loss_shape(_shape(loss), _shape(logits), expected_dim):
        return loss
    if tf.executing_eagerly():
        return loss
    expected_t = tf.concat([tf.shape(logits)[:-1], [expected_dim]], axis=0)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.equal(tf.shape(loss), expected_t)),
        [f"loss_fn must return logits' batch shape + [{expected_dim}]; loss shape:", tf.shape(loss)],
    )
    with tf.control_dependencies([check]):
        return tf.identity(loss)


def weighted_loss(unweighted: tf.Tensor, weights: Any, reduction: str) -> tf.Tensor:
    """The training loss: the sum of ``unweighted * weights``, divided by the number of
    loss elements for SUM_OVER_BATCH_SIZE (and AUTO, outside a distribution strategy), as
    Keras's ``compute_weighted_loss``."""
    weighted = tf.multiply(tf.cast(unweighted, tf.float32), tf.cast(weights, tf.float32))
    total = tf.reduce_sum(weighted)
    if reduction == Reduction.SUM:
        return total
    return tf.math.divide_no_nan(total, tf.cast(tf.size(weighted), tf.float32))
