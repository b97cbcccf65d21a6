"""The networks of the canned estimators, built in the estimator's graph with TF 2.15's
variable names.

- the DNN is a Keras 2 (``tf_keras``) model named ``dnn``: ``dnn/input_from_feature_columns/
  input_layer/<column>/...`` (a ``DenseFeatures`` layer), ``dnn/hiddenlayer_<i>/{kernel,bias}``,
  ``dnn/hiddenlayer_<i>/batchnorm_<i>/{gamma,beta,moving_mean,moving_variance}``,
  ``dnn/logits/{kernel,bias}``;
- the linear model is one weight matrix per column, ``linear/linear_model/<column>/weights``
  (``[num_buckets or dense size, units]``), and ``linear/linear_model/bias_weights``
  (``[units]``), all initialised to zeros.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from tf_bridge.runtime.zero_fraction import zero_fraction

_fc_internal = tf.compat.v2.__internal__.feature_column


def add_layer_summary(value: Any, tag: str) -> None:
    """``<tag>/fraction_of_zero_values`` and ``<tag>/activation``, as TF 2.15's DNN logs."""
    tf.compat.v1.summary.scalar(f"{tag}/fraction_of_zero_values", zero_fraction(value))
    tf.compat.v1.summary.histogram(f"{tag}/activation", value)


def hidden_blocks(
    hidden_units: Sequence[int], activation_fn: Any, dropout: float | None, batch_norm: bool
) -> list[tuple[str, Any, Any, Any]]:
    """Per hidden layer: ``(scope name, Dense, Dropout or None, BatchNormalization or None)``,
    Keras 2 layers named as TF 2.15's (``hiddenlayer_<i>``, ``hiddenlayer_<i>/batchnorm_<i>``)."""
    import tf_keras

    blocks = []
    for i, width in enumerate(hidden_units):
        scope = f"hiddenlayer_{i}"
        dense = tf_keras.layers.Dense(
            units=width,
            activation=activation_fn,
            kernel_initializer=tf.compat.v1.glorot_uniform_initializer(),
            name=scope,
        )
        drop = tf_keras.layers.Dropout(rate=dropout) if dropout is not None else None
        norm = None
        if batch_norm:
            norm = tf_keras.layers.BatchNormalization(
                momentum=0.999, trainable=True, name=f"{scope}/batchnorm_{i}"
            )
        blocks.append((scope, dense, drop, norm))
    return blocks


@functools.cache
def dnn_model_class() -> type:
    """The Keras 2 model class of the DNN (made on first use: ``tf_keras`` is imported then)."""
    import tf_keras

    class DNNModel(tf_keras.Model):
        """Feature columns -> hidden layers (each optionally with dropout and batch norm) -> logits.

        Args:
          units: int, the logits' last dimension.
          hidden_units: ints, one per hidden layer.
          feature_columns: v2 feature columns (``tf.feature_column.*``) for ``DenseFeatures``.
          activation_fn: the hidden layers' activation.
          dropout: None or the probability of dropping a coordinate (TRAIN only).
          batch_norm: batch normalisation (momentum 0.999, as TF 2.15) after each hidden layer.

        Raises:
          ValueError: ``units`` is not an int.
        """

        def __init__(
            self,
            units: int,
            hidden_units: Sequence[int],
            feature_columns: Sequence[Any],
            activation_fn: Any,
            dropout: float | None,
            batch_norm: bool,
            name: str = "dnn",
        ) -> None:
            if not isinstance(units, int):
                raise ValueError(f"units must be an int, got {type(units).__name__}.")
            super().__init__(name=name)
            self._input_layer = tf_keras.layers.DenseFeatures(
                feature_columns=feature_columns, name="input_from_feature_columns/input_layer"
            )
            self._blocks = hidden_blocks(hidden_units, activation_fn, dropout, batch_norm)
            self._logits_layer = tf_keras.layers.Dense(
                units=units,
                activation=None,
                kernel_initializer=tf.compat.v1.glorot_uniform_initializer(),
                name="logits",
            )

        def call(self, features: dict[str, Any], mode: str) -> Any:
            training = mode == ModeKeys.TRAIN
            net = self._input_layer(features, training=training)
            for scope, dense, drop, norm in self._blocks:
                net = dense(net)
                if drop is not None and training:
                    net = drop(net, training=True)
                if norm is not None:
                    net = norm(net, training=training)
                add_layer_summary(net, scope)
            logits = self._logits_layer(net)
            add_layer_summary(logits, "logits")
            return logits

    return DNNModel


def dnn_logits(
    units: int,
    hidden_units: Sequence[int],
    feature_columns: Sequence[Any],
    activation_fn: Any,
    dropout: float | None,
    batch_norm: bool,
    features: dict[str, Any],
    mode: str,
) -> tuple[Any, list[Any], list[Any]]:
    """Build the DNN in the current graph: ``(logits [batch, units], trainable variables,
    update ops (batch norm's moving averages))``."""
    model = dnn_model_class()(units, hidden_units, feature_columns, activation_fn, dropout, batch_norm)
    logits = model(features, mode)
    return logits, list(model.trainable_variables), list(model.updates)


def variable_scope_name(column_name: str) -> str:
    """A column's name as a variable scope (characters TF refuses become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", column_name)


def _is_categorical(column: Any) -> bool:
    return hasattr(column, "get_sparse_tensors") and hasattr(column, "num_buckets")


class _GraphStateManager(_fc_internal.StateManager.__mro__[1]):  # the abstract StateManager
    """Holds the variables and resources feature columns ask for, as graph variables named
    in the current variable scope (``tf.compat.v1.get_variable``)."""

    def __init__(self) -> None:
        self._variables: dict[tuple[str, str], Any] = {}
        self._resources: dict[tuple[str, str], Any] = {}

    def create_variable(
        self,
        feature_column: Any,
        name: str,
        shape: Any,
        dtype: Any = None,
        trainable: bool = True,
        use_resource: bool = True,
        initializer: Any = None,
    ) -> Any:
        variable = tf.compat.v1.get_variable(
            name,
            shape=shape,
            dtype=dtype or tf.float32,
            initializer=initializer,
            trainable=trainable,
            use_resource=use_resource,
        )
        self._variables[(feature_column.name, name)] = variable
        return variable

    def get_variable(self, feature_column: Any, name: str) -> Any:
        return self._variables[(feature_column.name, name)]

    def add_resource(self, feature_column: Any, resource_name: str, resource: Any) -> Any:
        self._resources[(feature_column.name, resource_name)] = resource
        return resource

    def has_resource(self, feature_column: Any, resource_name: str) -> bool:
        return (feature_column.name, resource_name) in self._resources

    def get_resource(self, feature_column: Any, resource_name: str) -> Any:
        return self._resources[(feature_column.name, resource_name)]

    @property
    def variables(self) -> list[Any]:
        return list(self._variables.values())


def check_linear_columns(feature_columns: Sequence[Any]) -> list[Any]:
    """The columns sorted by name, as TF orders them.

    Raises:
      ValueError: a column that is neither dense nor categorical, or two columns with the
        same name.
    """
    seen: dict[str, Any] = {}
    for column in feature_columns:
        if not (isinstance(column, _fc_internal.DenseColumn) or _is_categorical(column)):
            raise ValueError(f"feature_columns: {column!r} is neither a DenseColumn nor a CategoricalColumn.")
        if column.name in seen:
            raise ValueError(f"feature_columns: two columns are named {column.name!r}.")
        seen[column.name] = column
    return sorted(feature_columns, key=lambda c: c.name)


def _column_sum(column: Any, cache: Any, state: _GraphStateManager, combiner: str, weights: Any) -> Any:
    if _is_categorical(column):
        pair = column.get_sparse_tensors(cache, state)
        ids = tf.sparse.reshape(pair.id_tensor, [tf.shape(pair.id_tensor, out_type=tf.int64)[0], -1])
        weight = pair.weight_tensor
        if weight is not None:
            weight = tf.sparse.reshape(weight, [tf.shape(weight, out_type=tf.int64)[0], -1])
        return tf.nn.safe_embedding_lookup_sparse(
            weights, ids, sparse_weights=weight, combiner=combiner, name="weighted_sum"
        )
    dense = column.get_dense_tensor(cache, state)
    dense = tf.reshape(dense, (tf.shape(dense)[0], column.variable_shape.num_elements()))
    return tf.matmul(dense, weights, name="weighted_sum")


def fraction_of_zero(variables: list[Any]) -> Any:
    """The share of zeros among all the variables' elements (float32 scalar)."""
    sizes = [tf.cast(tf.size(v), tf.float32) for v in variables]
    zeros = [zero_fraction(v) * s for v, s in zip(variables, sizes, strict=True)]
    return tf.math.add_n(zeros) / tf.math.add_n(sizes)


def linear_logits(
    units: int,
    feature_columns: Sequence[Any],
    sparse_combiner: str,
    features: dict[str, Any],
    scope: str = "linear/linear_model",
) -> tuple[Any, list[Any]]:
    """Build the linear model in the current graph: ``(logits [batch, units], its variables
    (the columns' states and weights, then the bias))``. A categorical column contributes
    the sum of its ids' weight rows, combined per example by ``sparse_combiner``
    (``'sum'``, ``'mean'`` or ``'sqrtn'``). ``scope`` is the variable scope under the
    current one (the v1 classes give ``linear_model`` inside their partitioned ``linear``
    scope; the variables are then ``PartitionedVariable``s, read whole).

    Raises:
      ValueError: see ``check_linear_columns``.
    """
    columns = check_linear_columns(feature_columns)
    state = _GraphStateManager()
    weights = {}
    with tf.compat.v1.variable_scope(scope, auxiliary_name_scope=False):
        for column in columns:
            with tf.compat.v1.variable_scope(variable_scope_name(column.name), auxiliary_name_scope=False):
                column.create_state(state)
                rows = column.num_buckets if _is_categorical(column) else column.variable_shape.num_elements()
                weights[column.name] = state.create_variable(
                    column, "weights", (rows, units), tf.float32, initializer=tf.compat.v1.zeros_initializer()
                )
        bias = tf.compat.v1.get_variable(
            "bias_weights",
            shape=[units],
            dtype=tf.float32,
            initializer=tf.compat.v1.zeros_initializer(),
            use_resource=True,
        )
    with tf.name_scope(scope):
        cache = _fc_internal.FeatureTransformationCache(features)
        sums = []
        for column in columns:
            with tf.name_scope(variable_scope_name(column.name)):
                sums.append(_column_sum(column, cache, state, sparse_combiner, weights[column.name]))
        logits = tf.nn.bias_add(tf.math.add_n(sums, name="weighted_sum_no_bias"), bias, name="weighted_sum")
    if units > 1:
        tf.compat.v1.summary.histogram("bias", bias)
    else:
        tf.compat.v1.summary.scalar("bias", tf.convert_to_tensor(bias)[0])
    tf.compat.v1.summary.scalar("fraction_of_zero_weights", fraction_of_zero(state.variables))
    return logits, state.variables + [bias]
