"""The networks of TF 2.15's v1 canned estimators, built with ``tf.compat.v1.get_variable``
so that a variable scope's partitioner splits them as TF 2.15's did.

TF 2.15's v1 classes built their networks inside partitioned variable scopes: every
variable is a ``PartitionedVariable`` (one part, ``<name>/part_0``, without parameter
servers); a Saver writes it whole under ``<name>``, so a checkpoint holds the same keys as
one of plain variables. Names (the checkpoint's keys):

- DNN: ``dnn/input_from_feature_columns/input_layer/<column>/...`` (the feature columns'
  variables), ``dnn/hiddenlayer_<i>/{kernel,bias}``, ``dnn/hiddenlayer_<i>/batchnorm_<i>/
  {gamma,beta,moving_mean,moving_variance}``, ``dnn/logits/{kernel,bias}``;
- linear: ``linear/linear_model/<column>/weights`` and ``linear/linear_model/bias_weights``
  (``tf_bridge.runtime.canned._layers.linear_logits``);
- baseline: ``baseline/bias``.

TRAIN summaries (tags as TF 2.15 wrote them): ``dnn/dnn/hiddenlayer_<i>/{fraction_of_zero_
values,activation}`` and ``dnn/dnn/logits/...``; ``linear/bias``,
``linear/fraction_of_zero_weights``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from tf_bridge.runtime.canned._layers import add_layer_summary, fraction_of_zero, linear_logits

#: The input layer's default partitioner slices: 64 MiB (TF 2.15's v1 default).
INPUT_LAYER_MIN_SLICE_SIZE = 64 << 20


def default_partitioner(num_ps_replicas: int, min_slice_size: int | None = None) -> Any:
    """TF 2.15's v1 default partitioner: ``tf.compat.v1.min_max_variable_partitioner`` with
    at most ``num_ps_replicas`` parts (one part without parameter servers) of at least
    ``min_slice_size`` bytes (its own default, 256 KiB, when None)."""
    if min_slice_size is None:
        return tf.compat.v1.min_max_variable_partitioner(max_partitions=num_ps_replicas)
    return tf.compat.v1.min_max_variable_partitioner(
        max_partitions=num_ps_replicas, min_slice_size=min_slice_size
    )


def _dense(net: Any, units: int, activation: Any, scope: str) -> Any:
    """A fully connected layer in variable scope ``scope``: ``kernel`` (Glorot uniform)
    ``[in, units]`` and ``bias`` (zeros) ``[units]``, as ``tf.compat.v1.layers.Dense``."""
    with tf.compat.v1.variable_scope(scope):
        kernel = tf.compat.v1.get_variable(
            "kernel",
            shape=[net.shape[-1], units],
            dtype=tf.float32,
            initializer=tf.compat.v1.glorot_uniform_initializer(),
        )
        bias = tf.compat.v1.get_variable(
            "bias", shape=[units], dtype=tf.float32, initializer=tf.compat.v1.zeros_initializer()
        )
        out = tf.nn.bias_add(tf.matmul(net, kernel), bias)
        return activation(out) if activation is not None else out


def _batch_norm(net: Any, layer_id: int, training: bool) -> Any:
    """TF 2.15's v1 batch norm after hidden layer ``layer_id`` (momentum 0.999), a legacy
    TF1 layer (``get_variable``), its moving averages' updates in ``UPDATE_OPS``."""
    from tf_keras.src.legacy_tf_layers.normalization import BatchNormalization

    name = f"batchnorm_{layer_id}"
    layer = BatchNormalization(momentum=0.999, trainable=True, name=name, _scope=name)
    return layer(net, training=training)


def dnn_logits_v1(
    units: int,
    hidden_units: Sequence[int],
    feature_columns: Sequence[Any],
    activation_fn: Any,
    dropout: float | None,
    input_layer_partitioner: Any,
    batch_norm: bool,
    features: dict[str, Any],
    mode: str,
) -> Any:
    """The v1 DNN's logits ``[batch, units]``, built in the current variable scope (the
    caller opens ``dnn`` with its partitioner): the input layer under
    ``input_from_feature_columns`` with ``input_layer_partitioner``, the hidden layers
    (dropout in TRAIN, batch norm), the logits layer, with TF 2.15's layer summaries.

    Raises:
      ValueError: ``units`` is not an int (as TF).
    """
    if not isinstance(units, int):
        raise ValueError(f"units must be an int, got {type(units).__name__}.")
    training = mode == ModeKeys.TRAIN
    outer = tf.compat.v1.get_variable_scope().name
    with tf.compat.v1.variable_scope("input_from_feature_columns", partitioner=input_layer_partitioner):
        net = tf.compat.v1.feature_column.input_layer(features, list(feature_columns))
    for i, width in enumerate(hidden_units):
        scope = f"hiddenlayer_{i}"
        net = _dense(net, width, activation_fn, scope)
        if dropout is not None and training:
            net = tf.nn.dropout(net, rate=dropout)
        if batch_norm:
            with tf.compat.v1.variable_scope(scope):
                net = _batch_norm(net, i, training)
        add_layer_summary(net, f"{outer}/{scope}")
    logits = _dense(net, units, None, "logits")
    add_layer_summary(logits, f"{outer}/logits")
    return logits


def linear_logits_v1(
    units: int, feature_columns: Sequence[Any], sparse_combiner: str, features: dict[str, Any]
) -> Any:
    """The v1 linear model's logits ``[batch, units]`` in the current variable scope (the
    caller opens ``linear`` with its partitioner); summaries ``bias`` and
    ``fraction_of_zero_weights`` in that scope's name scope. Columns of TF1's old
    ``_FeatureColumn`` classes (``feature_column._numeric_column``, ...) go through
    ``tf.compat.v1.feature_column.linear_model``, as TF 2.15's v1 class sent them to its
    old linear model; the variables' names are the same.

    Raises:
      ValueError: a column of neither kind, two columns of one name.
    """
    columns = list(feature_columns)
    if all(isinstance(c, tf.compat.v2.__internal__.feature_column.FeatureColumn) for c in columns):
        logits, _ = linear_logits(units, columns, sparse_combiner, features, scope="linear_model")
        return logits
    cols_to_vars: dict[Any, Any] = {}
    logits = tf.compat.v1.feature_column.linear_model(
        features, columns, units=units, sparse_combiner=sparse_combiner, cols_to_vars=cols_to_vars
    )
    bias = cols_to_vars.pop("bias")
    if units > 1:
        tf.compat.v1.summary.histogram("bias", bias)
    else:
        tf.compat.v1.summary.scalar("bias", tf.convert_to_tensor(bias[0])[0])
    weights = [part for parts in cols_to_vars.values() for part in parts]
    tf.compat.v1.summary.scalar("fraction_of_zero_weights", fraction_of_zero(weights))
    return logits


def baseline_logits_v1(features: dict[str, Any], logits_dimension: int, weight_key: str | None) -> Any:
    """The baseline's logits ``[batch, logits_dimension]``: the variable ``baseline/bias``
    (zeros) repeated over the batch (the first dimension of a feature other than the
    weight; all such features must agree at run time).

    Raises:
      TypeError: no feature other than the weight (no batch size, as TF 2.15).
    """
    sizes = [tf.compat.v1.shape(value)[0] for key, value in features.items() if key != weight_key]
    if not sizes:
        raise TypeError(
            f"a baseline model needs a feature other than the weight to size its batch; got keys {sorted(features)}."
        )
    with tf.compat.v1.variable_scope("baseline"):
        bias = tf.compat.v1.get_variable(
            "bias", shape=[logits_dimension], dtype=tf.float32, initializer=tf.compat.v1.zeros_initializer()
        )
    checks = [tf.compat.v1.debugging.assert_equal(sizes[0], size) for size in sizes[1:]]
    with tf.control_dependencies(checks), tf.name_scope("baseline"):
        return tf.math.multiply(bias, tf.ones([sizes[0], logits_dimension]))


def dnn_logit_fn_builder(
    units: int,
    hidden_units: Sequence[int],
    feature_columns: Sequence[Any],
    activation_fn: Any,
    dropout: float | None,
    input_layer_partitioner: Any,
    batch_norm: bool,
) -> Any:
    """``tf.compat.v1.estimator.experimental.dnn_logit_fn_builder`` (TF 2.15): a
    ``logit_fn(features, mode)`` building the v1 DNN (``dnn_logits_v1``) in the caller's
    variable scope and returning its logits ``[batch, units]``.

    Raises:
      ValueError: ``units`` is not an int (now, as TF).
    """
    if not isinstance(units, int):
        raise ValueError(f"units must be an int, got {type(units).__name__}.")

    def dnn_logit_fn(features: dict[str, Any], mode: str) -> Any:
        return dnn_logits_v1(
            units,
            hidden_units,
            feature_columns,
            activation_fn,
            dropout,
            input_layer_partitioner,
            batch_norm,
            features,
            mode,
        )

    return dnn_logit_fn


def linear_logit_fn_builder(units: int, feature_columns: Sequence[Any], sparse_combiner: str = "sum") -> Any:
    """``tf.compat.v1.estimator.experimental.linear_logit_fn_builder`` (TF 2.15): a
    ``logit_fn(features)`` building the v1 linear model (``linear_logits_v1``:
    ``linear_model/...`` in the caller's variable scope) and returning its logits
    ``[batch, units]``."""

    def linear_logit_fn(features: dict[str, Any]) -> Any:
        return linear_logits_v1(units, feature_columns, sparse_combiner, features)

    return linear_logit_fn
