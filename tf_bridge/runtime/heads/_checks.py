"""Input checks shared by the heads: logits, labels, weights, label ranges, loss_fn, the
loss reduction; and the weighted loss. tf.estimator's rules and exception types:

- in eager mode, and in graph mode wherever static shapes decide it, a bad shape or
  dtype is a ValueError raised now;
- in graph mode, what only the values or the unknown sizes decide is an assertion in the
  graph that fails with ``tf.errors.InvalidArgumentError`` when it runs.

Every message names the argument and the shapes it saw.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from jaxspec.heads.keys import Reduction

# tf.estimator's loss reductions are Keras's (tf.keras.losses.Reduction in TF <= 2.15,
# tf_keras.losses.Reduction today); NONE is not allowed for a head.
REDUCTION_AUTO = Reduction.AUTO
REDUCTION_NONE = Reduction.NONE
REDUCTION_SUM = Reduction.SUM
REDUCTION_SUM_OVER_BATCH_SIZE = Reduction.SUM_OVER_BATCH_SIZE
_REDUCTIONS = (REDUCTION_AUTO, REDUCTION_SUM, REDUCTION_SUM_OVER_BATCH_SIZE)
_LOSS_FN_ARGS = ("labels", "logits", "features", "loss_reduction")


def _shape(t: Any) -> tuple[Any, ...] | None:
    return None if t.shape.rank is None else tuple(t.shape.as_list())


def check_loss_reduction(loss_reduction: Any) -> str:
    """ValueError unless one of ``'auto'``, ``'sum'``, ``'sum_over_batch_size'``."""
    if loss_reduction not in _REDUCTIONS:
        raise ValueError(
            f"loss_reduction must be one of {list(_REDUCTIONS)} (tf_keras.losses.Reduction, "
            f"not NONE); got {loss_reduction!r}."
        )
    return loss_reduction


def fn_args(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names ``fn`` takes (``self`` of a bound method not counted)."""
    return tuple(inspect.signature(fn).parameters)


def check_loss_fn(loss_fn: Any) -> None:
    """ValueError unless ``loss_fn`` takes ``labels`` and ``logits`` and, besides them, only
    ``features`` and ``loss_reduction``."""
    args = fn_args(loss_fn)
    for required in ("labels", "logits"):
        if required not in args:
            raise ValueError(f"loss_fn has to take an argument {required!r}; it takes {list(args)}.")
    extra = [a for a in args if a not in _LOSS_FN_ARGS]
    if extra:
        raise ValueError(
            f"loss_fn takes arguments a head cannot give: {extra} (allowed: {list(_LOSS_FN_ARGS)})."
        )


def check_vocabulary(label_vocabulary: Any) -> None:
    """Check a head's ``label_vocabulary`` argument: None, or a list or tuple (of str).

    Raises:
      ValueError: any other type (a set, a dict, a str, a tensor), naming the type, as
        tf.estimator 2.15's heads raise it in their constructors. The items and their
        number are checked by each head, which knows ``n_classes``.
    """
    if label_vocabulary is not None and not isinstance(label_vocabulary, (list, tuple)):
        raise ValueError(
            f"label_vocabulary has to be a list or tuple of str; got {type(label_vocabulary).__name__}."
        )


def check_thresholds(thresholds: Any) -> tuple[float, ...]:
    """A head's ``thresholds`` argument (an iterable of floats, or None) as a tuple; ``()``
    for None or empty. Each threshold yields tf.estimator's ``accuracy/positive_threshold_T``,
    ``precision/...`` and ``recall/...`` eval metrics.

    Raises:
      ValueError: a threshold not strictly between 0 and 1, listing the thresholds given,
        as tf.estimator 2.15's BinaryClassHead and MultiLabelHead raise it.
    """
    thresholds = tuple(thresholds) if thresholds else ()
    bad = [t for t in thresholds if not 0.0 < t < 1.0]
    if bad:
        raise ValueError(f"thresholds must lie strictly between 0 and 1; got {list(thresholds)}.")
    return thresholds


def check_logits(logits: Any, logits_dimension: int) -> tf.Tensor:
    """``logits`` as float32 ``[D0, ..., DN, logits_dimension]``."""
    logits = tf.cast(tf.convert_to_tensor(logits), tf.float32)
    shape = _shape(logits)
    if shape is not None and len(shape) < 2:
        raise ValueError(
            f"logits must have rank >= 2, [D0, ..., DN, {logits_dimension}]; got rank {len(shape)}, shape {shape}."
        )
    if shape is not None and shape[-1] is not None:
        if shape[-1] != logits_dimension:
            raise ValueError(
                f"logits must have shape [D0, ..., DN, {logits_dimension}] (the head's logits_dimension); "
                f"got {shape}."
            )
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
    if labels is None:
        raise ValueError(
            "labels is None: a head needs a labels tensor in TRAIN and EVAL (does input_fn return "
            "(features, labels)?)."
        )
    if isinstance(labels, (tf.SparseTensor, tf.compat.v1.SparseTensorValue)):
        raise ValueError(
            f"labels must be a dense tensor [D0, ..., DN, {expected_dim}], not a SparseTensor "
            "(tf.sparse.to_dense turns it into one)."
        )
    labels = tf.convert_to_tensor(labels)
    if (
        labels.shape.rank is not None
        and logits.shape.rank is not None
        and labels.shape.rank == logits.shape.rank - 1
    ):
        labels = tf.expand_dims(labels, -1)
    shape, logits_shape = _shape(labels), _shape(logits)
    if shape is not None and len(shape) < 2:
        raise ValueError(f"labels must have rank >= 2; got rank {len(shape)}, shape {shape}.")
    if shape is not None and shape[-1] is not None and shape[-1] != expected_dim:
        raise ValueError(
            f"labels must have shape [D0, ..., DN, {expected_dim}] (check n_classes / label_dimension); "
            f"got labels shape {shape}."
        )
    expected = None if logits_shape is None else logits_shape[:-1] + (expected_dim,)
    if shape is not None and expected is not None and None not in shape and None not in expected:
        if shape != expected:
            raise ValueError(
                f"labels shape {shape} does not match logits shape {logits_shape}: expected {expected}."
            )
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
    shape, logits_shape = _shape(weights), _shape(logits)
    allowed = "[D0, ..., DN] or [D0, ..., DN, 1]" + (", or logits' shape" if per_logit else "")
    if shape is not None and logits_shape is not None and len(shape) == len(logits_shape) - 1:
        weights = tf.expand_dims(weights, -1)
        shape = shape + (1,)
    if shape is not None and logits_shape is not None and None not in shape and None not in logits_shape:
        ok = shape == logits_shape[:-1] + (1,) or (per_logit and shape == logits_shape)
        if not ok:
            raise ValueError(
                f"weights must have shape {allowed}; got weights {shape} for logits {logits_shape}."
            )
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
    shape, logits_shape = _shape(loss), _shape(logits)
    expected = None if logits_shape is None else logits_shape[:-1] + (expected_dim,)
    if shape is not None and expected is not None and None not in shape and None not in expected:
        if shape != expected:
            raise ValueError(
                f"loss_fn must return a tensor of shape {expected} for logits {logits_shape}; got {shape}."
            )
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
    if reduction == REDUCTION_SUM:
        return total
    return tf.math.divide_no_nan(total, tf.cast(tf.size(weighted), tf.float32))
