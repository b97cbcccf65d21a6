"""Input checks of tf_bridge's heads on TF tensors: logits, labels, weights, label ranges,
``loss_fn``'s output; and the weighted loss. What static shapes decide and the argument
checks are ``jaxspec.rules.head_args``' (shared with jaxspec's heads); tf.estimator's
rules and exception types:

- in eager mode a bad shape or dtype is a ValueError raised now;
- in graph mode, a ValueError is raised while building only where TF 2.15's heads raised
  one: a known logits or labels rank below 2, a known last dimension of logits or labels
  other than the head's, a dtype; and TensorFlow's own loss ops refuse static shapes they
  cannot combine. Everything else about shapes (the other dimensions of labels, the
  weights' shape, ``loss_fn``'s output) and every value check is an assertion in the
  graph that fails with ``tf.errors.InvalidArgumentError`` when it runs, whether the
  shapes are static or not, as TF's.

Every message names the argument and the shapes it saw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import tensorflow as tf
from tensorflow.python.feature_column.feature_column_v2 import NumericColumn

from jaxspec.rules import head_args as rules
from jaxspec.rules.head_args import Shape, fn_args
from jaxspec.rules.head_keys import Reduction
from jaxspec.spec.fn_types import PyTree

TensorLike: TypeAlias = tf.types.experimental.TensorLike
# A head's ``weight_column``: None, a feature key, or a ``tf.feature_column.numeric_column``.
WeightColumn: TypeAlias = str | NumericColumn | None

# tf.estimator's loss reductions are Keras's (tf.keras.losses.Reduction in TF <= 2.15,
# tf_keras.losses.Reduction today): the same strings as ``Reduction``.
REDUCTION_SUM_OVER_BATCH_SIZE = Reduction.SUM_OVER_BATCH_SIZE


def _shape(t: tf.Tensor) -> Shape:
    return None if t.shape.rank is None else tuple(t.shape.as_list())


def _static_equal(shape: Shape, expected: Shape) -> bool:
    """True when both shapes are fully known and equal (no run-time check needed)."""
    known = shape is not None and expected is not None and None not in shape and None not in expected
    return known and tuple(shape) == tuple(expected)  # type: ignore[arg-type]


def _broadcastable(a: Shape, b: Shape) -> bool:
    try:
        tf.broadcast_static_shape(tf.TensorShape(a), tf.TensorShape(b))
    except ValueError:
        return False
    return True


def same_shape(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """bool scalar: the int32 shape vectors ``a`` and ``b`` are equal, lengths included
    (``tf.equal`` alone would broadcast ``[2]`` against ``[2, 2]``)."""
    size_a, size_b = tf.size(a), tf.size(b)
    n = tf.maximum(size_a, size_b)
    pad_a = tf.pad(a, [[0, n - size_a]], constant_values=-1)
    pad_b = tf.pad(b, [[0, n - size_b]], constant_values=-1)
    return tf.logical_and(tf.equal(size_a, size_b), tf.reduce_all(tf.equal(pad_a, pad_b)))


def _assert_in_graph(ok: tf.Tensor, value: tf.Tensor, data: list[object]) -> tf.Tensor:
    """``value`` behind an assertion of ``ok`` (InvalidArgumentError with ``data`` when the
    graph runs and ``ok`` is False)."""
    with tf.control_dependencies([tf.debugging.Assert(ok, data, summarize=16)]):
        return tf.identity(value)


def static_n_classes(n_classes: int | tf.Tensor, minimum: int) -> int:
    """``n_classes`` as a Python int when it is a tensor whose value is known while
    building (``tf.constant(3)``, as TF 2.15's heads accepted); anything else unchanged
    (``jaxspec.rules.head_args.check_n_classes`` checks it).

    Raises:
      ValueError: a tensor whose value is known only at run time (tf_bridge's heads need
        the number of classes while building; TF 2.15 deferred it), or not an integer.
      tf.errors.InvalidArgumentError: a tensor value below ``minimum`` (TF's type for it).
    """
    if not tf.is_tensor(n_classes):
        return n_classes
    value = tf.get_static_value(n_classes)
    if value is None or not n_classes.dtype.is_integer or getattr(value, "ndim", 0) != 0:
        raise ValueError(
            "n_classes must be an int, or a scalar integer tensor whose value is known while the "
            f"graph is built; got {n_classes!r}."
        )
    if int(value) < minimum:
        raise tf.errors.InvalidArgumentError(
            None, None, f"n_classes must be at least {minimum}; the tensor holds {int(value)}."
        )
    return int(value)


def check_logits(logits: TensorLike, logits_dimension: int) -> tf.Tensor:
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


def check_labels(labels: PyTree, logits: tf.Tensor, expected_dim: int) -> tf.Tensor:
    """Dense ``labels`` of shape ``logits.shape[:-1] + [expected_dim]``; labels one rank
    below logits get a last dimension of 1 (tf.estimator's rule).

    Raises:
      ValueError: labels None or sparse, a known rank < 2, a known last dimension other
        than ``expected_dim``, or (eager) other dimensions unlike logits'.
      tf.errors.InvalidArgumentError: (graph mode) at run time, for the rank and the other
        dimensions, static or not.
    """
    rules.check_labels_present(
        labels, expected_dim, isinstance(labels, (tf.SparseTensor, tf.compat.v1.SparseTensorValue))
    )
    labels = tf.convert_to_tensor(labels)
    if rules.labels_need_last_axis(_shape(labels), _shape(logits)):
        labels = tf.expand_dims(labels, -1)
    if tf.executing_eagerly():
        rules.check_labels_shape(_shape(labels), _shape(logits), expected_dim)
        return labels
    rules.check_labels_rank_and_last_dim(_shape(labels), expected_dim)
    logits_shape = _shape(logits)
    expected = None if logits_shape is None else logits_shape[:-1] + (expected_dim,)
    if _static_equal(_shape(labels), expected):
        return labels
    expected_t = tf.concat([tf.shape(logits)[:-1], [expected_dim]], axis=0)
    labels_t = tf.shape(labels)
    ok = tf.logical_and(tf.greater_equal(tf.size(labels_t), 2), same_shape(labels_t, expected_t))
    message = (
        f"labels must have logits' shape but the last dimension, which is {expected_dim}; expected, got:"
    )
    return _assert_in_graph(ok, labels, [message, expected_t, labels_t])


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


def _weight_tensor(features: PyTree, weight_column: WeightColumn) -> tf.Tensor:
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


def weights_for(
    features: PyTree, weight_column: WeightColumn, logits: tf.Tensor, per_logit: bool = False
) -> tf.Tensor | float:
    """The example weights, float32 ``[D0, ..., DN, 1]`` (or ``logits``' shape with
    ``per_logit``); 1.0 without a weight column. Weights one rank below logits get a last
    dimension of 1.

    Raises:
      ValueError: the column is missing from features; (eager) weights of another shape;
        (graph mode) static shapes that do not broadcast against the loss (TF 2.15's
        weighting multiply raised ValueError there).
      TypeError: weight_column neither a str nor a numeric column.
      tf.errors.UnimplementedError: weights of a dtype that is not numeric (TF's type for
        a failed cast).
      tf.errors.InvalidArgumentError: (graph mode) a wrong shape, static or not, when the
        graph runs (as TF 2.15's heads).
    """
    if weight_column is None:
        return 1.0
    weights = _weight_tensor(features, weight_column)
    if rules.labels_need_last_axis(_shape(weights), _shape(logits)):
        weights = tf.expand_dims(weights, -1)
    if tf.executing_eagerly():
        rules.check_weights_shape(_shape(weights), _shape(logits), per_logit)
        return weights
    logits_shape = _shape(logits)
    one = None if logits_shape is None else logits_shape[:-1] + (1,)
    if _static_equal(_shape(weights), one) or (per_logit and _static_equal(_shape(weights), logits_shape)):
        return weights
    loss_shape = logits_shape if per_logit else one
    if not _broadcastable(_shape(weights), loss_shape):
        # TF 2.15 failed here too, while building, in the weighting multiply (ValueError)
        rules.check_weights_shape(_shape(weights), logits_shape, per_logit)
    w_shape, l_shape = tf.shape(weights), tf.shape(logits)
    ok = same_shape(w_shape, tf.concat([l_shape[:-1], [1]], axis=0))
    if per_logit:
        ok = tf.logical_or(ok, same_shape(w_shape, l_shape))
    allowed = "[D0, ..., DN] or [D0, ..., DN, 1]" + (", or logits' shape" if per_logit else "")
    return _assert_in_graph(
        ok, weights, [f"weights must have shape {allowed}; logits, weights:", l_shape, w_shape]
    )


def call_loss_fn(
    loss_fn: Callable[..., Any], labels: tf.Tensor, logits: tf.Tensor, features: PyTree, expected_dim: int
) -> tf.Tensor:
    """``loss_fn(labels=, logits=[, features=])``, checked to be ``logits.shape[:-1] + [expected_dim]``.

    Raises:
      ValueError: (eager) a loss of another shape.
      tf.errors.InvalidArgumentError: (graph mode) the same, static or not, when the graph
        runs (as TF 2.15's heads).
    """
    kwargs = {"features": features} if "features" in fn_args(loss_fn) else {}
    loss = tf.convert_to_tensor(loss_fn(labels=labels, logits=logits, **kwargs))
    if tf.executing_eagerly():
        rules.check_loss_shape(_shape(loss), _shape(logits), expected_dim)
        return loss
    logits_shape = _shape(logits)
    if _static_equal(_shape(loss), None if logits_shape is None else logits_shape[:-1] + (expected_dim,)):
        return loss
    l_shape, loss_shape = tf.shape(logits), tf.shape(loss)
    ok = same_shape(loss_shape, tf.concat([l_shape[:-1], [expected_dim]], axis=0))
    message = f"loss_fn must return logits' shape with a last dimension of {expected_dim}; logits, loss:"
    return _assert_in_graph(ok, loss, [message, l_shape, loss_shape])


def weighted_loss(unweighted: tf.Tensor, weights: tf.Tensor | float | None, reduction: str) -> tf.Tensor:
    """The training loss: the sum of ``unweighted * weights``, divided by the number of
    loss elements for SUM_OVER_BATCH_SIZE (and AUTO, outside a distribution strategy), as
    Keras's ``compute_weighted_loss``."""
    weighted = tf.multiply(tf.cast(unweighted, tf.float32), tf.cast(weights, tf.float32))
    total = tf.reduce_sum(weighted)
    if reduction == Reduction.SUM:
        return total
    return tf.math.divide_no_nan(total, tf.cast(tf.size(weighted), tf.float32))
