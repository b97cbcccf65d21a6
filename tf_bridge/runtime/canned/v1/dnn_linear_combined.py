"""``tf.compat.v1.estimator.DNNLinearCombinedClassifier``, ``...Regressor`` and
``...Estimator`` (TF 2.15's v1 classes, "wide and deep"; they differ only by their head).

The DNN in the variable scope ``dnn`` (partitioned by ``min_max_variable_partitioner(
max_partitions=num_ps_replicas)``, its input layer by ``input_layer_partitioner``), the
linear model in ``linear`` (partitioned by ``input_layer_partitioner``: default the same
with 64 MiB slices); logits are their sum. TF1 optimizers: the DNN's Adagrad at 0.001 and
the linear Ftrl at ``min(0.005, 1/sqrt(number of linear columns))`` when given by name;
each minimizes the loss over its own scope's trainable variables, then the global step
grows by one. Slots are ``<variable>/Adagrad``, ``<variable>/Ftrl``, ``<variable>/Ftrl_1``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned._layers import add_layer_summary
from tf_bridge.runtime.canned.dnn import check_features
from tf_bridge.runtime.canned.dnn_linear_combined import (
    DNN_LEARNING_RATE,
    check_feature_columns,
    linear_learning_rate,
)
from tf_bridge.runtime.canned.v1 import heads
from tf_bridge.runtime.canned.v1.dnn import num_ps_replicas
from tf_bridge.runtime.canned.v1.networks import (
    INPUT_LAYER_MIN_SLICE_SIZE,
    default_partitioner,
    dnn_logits_v1,
    linear_logits_v1,
)
from tf_bridge.runtime.canned.v1.optimizers import get_optimizer_instance
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.v1_forms import V1Methods, v1_loss_reduction

_V1_SUM = tf.compat.v1.losses.Reduction.SUM


def _check_not_sync_replicas(optimizer: Any) -> Any:
    if isinstance(optimizer, tf.compat.v1.train.SyncReplicasOptimizer):
        raise ValueError(
            "a DNNLinearCombined estimator has two optimizers: SyncReplicasOptimizer cannot wrap them; "
            "use it with a DNN or a Linear estimator."
        )
    return optimizer


def _dnn_part(features: PyTree, mode: str, head: Any, ps: int, partitioner: Any, kw: dict[str, Any]) -> Any:
    """``(logits, optimizer, scope name)`` of the DNN part."""
    if not kw["dnn_hidden_units"]:
        raise ValueError("dnn_hidden_units must be given when dnn_feature_columns are.")
    opt = _check_not_sync_replicas(
        get_optimizer_instance(kw["dnn_optimizer"], learning_rate=DNN_LEARNING_RATE)
    )
    with tf.compat.v1.variable_scope(
        "dnn", values=tuple(features.values()), partitioner=default_partitioner(ps)
    ) as s:
        logits = dnn_logits_v1(
            head.logits_dimension,
            kw["dnn_hidden_units"],
            kw["dnn_feature_columns"],
            kw["dnn_activation_fn"],
            kw["dnn_dropout"],
            partitioner,
            kw["batch_norm"],
            features,
            mode,
        )
        return logits, opt, s.name


def _linear_part(features: PyTree, head: Any, partitioner: Any, kw: dict[str, Any]) -> Any:
    """``(logits, optimizer, scope name)`` of the linear part."""
    columns = kw["linear_feature_columns"]
    opt = get_optimizer_instance(kw["linear_optimizer"], learning_rate=linear_learning_rate(len(columns)))
    _check_not_sync_replicas(opt)
    with tf.compat.v1.variable_scope("linear", values=tuple(features.values()), partitioner=partitioner) as s:
        logits = linear_logits_v1(head.logits_dimension, columns, kw["linear_sparse_combiner"], features)
        add_layer_summary(logits, s.name)
        return logits, opt, s.name


def dnn_linear_combined_model_fn_v1(
    features: PyTree, labels: PyTree, mode: str, head: Any, config: Any = None, **kw: Any
) -> Any:
    """TF 2.15's v1 combined model_fn (``kw``: the classes' ``linear_*``, ``dnn_*``,
    ``input_layer_partitioner``, ``batch_norm`` arguments).

    Raises:
      ValueError: features not a dict, both column lists empty, DNN columns without
        ``dnn_hidden_units``, a bad optimizer or a SyncReplicasOptimizer.
    """
    check_features(features)
    check_feature_columns(kw["linear_feature_columns"], kw["dnn_feature_columns"])
    ps = num_ps_replicas(config)
    partitioner = kw["input_layer_partitioner"] or default_partitioner(ps, INPUT_LAYER_MIN_SLICE_SIZE)
    parts = []
    if kw["dnn_feature_columns"]:
        parts.append(_dnn_part(features, mode, head, ps, partitioner, kw))
    if kw["linear_feature_columns"]:
        parts.append(_linear_part(features, head, partitioner, kw))
    logits = parts[0][0] if len(parts) == 1 else parts[0][0] + parts[1][0]

    def train_op_fn(loss: Any) -> Any:
        trainable = tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES
        ops = [
            opt.minimize(loss, var_list=tf.compat.v1.get_collection(trainable, scope=s))
            for _, opt, s in parts
        ]
        with tf.control_dependencies([tf.group(*ops)]):
            return tf.compat.v1.assign_add(tf.compat.v1.train.get_global_step(), 1).op

    return head.create_estimator_spec(
        features=features, mode=mode, labels=labels, train_op_fn=train_op_fn, logits=logits
    )


class _CombinedV1(V1Methods, Estimator):
    def _init_combined(self, head: Any, model_dir: Any, config: Any, warm_start_from: Any, **kw: Any) -> None:
        self._head = head
        kw["linear_feature_columns"] = tuple(kw["linear_feature_columns"] or [])
        kw["dnn_feature_columns"] = tuple(kw["dnn_feature_columns"] or [])
        check_feature_columns(kw["linear_feature_columns"], kw["dnn_feature_columns"])

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            return dnn_linear_combined_model_fn_v1(features, labels, mode, head, config=config, **kw)

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class DNNLinearCombinedClassifier(_CombinedV1):
    """A wide-and-deep classifier as ``tf.compat.v1.estimator.DNNLinearCombinedClassifier``
    (TF 2.15's v1 class): TF1 optimizers and slot names, partitioned variables, v1
    summaries and metrics.

    Args:
      model_dir: checkpoints and summaries.
      linear_feature_columns: the linear part's ``tf.feature_column`` columns.
      linear_optimizer: a name (Ftrl, ... at ``min(0.005, 1/sqrt(len(linear_feature_columns)))``),
        a ``tf.compat.v1.train.Optimizer`` or a callable returning one.
      dnn_feature_columns: the DNN's columns (dense ones).
      dnn_optimizer: a name (at 0.001), a ``tf.compat.v1.train.Optimizer`` or a callable.
      dnn_hidden_units: ints, the width of each hidden layer (required with DNN columns).
      dnn_activation_fn: the hidden layers' activation.
      dnn_dropout: None or the probability of dropping a coordinate in TRAIN.
      n_classes: int >= 2.
      weight_column: None, a feature key or a ``numeric_column``.
      label_vocabulary: None or the label strings.
      input_layer_partitioner: partitioner of the DNN's input layer and of the linear
        model (default ``min_max_variable_partitioner(max_partitions=num_ps_replicas,
        min_slice_size=64 << 20)``).
      config: a ``tf_bridge.RunConfig``.
      warm_start_from: a checkpoint path or ``WarmStartSettings``.
      loss_reduction: a ``tf.compat.v1.losses.Reduction`` (default SUM).
      batch_norm: batch normalisation after each hidden layer.
      linear_sparse_combiner: ``'sum'``, ``'mean'`` or ``'sqrtn'``.

    Raises:
      ValueError: both column lists empty, a bad head argument or ``loss_reduction``; at
        train time a bad optimizer, DNN columns without ``dnn_hidden_units``.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        linear_feature_columns: Sequence[Any] | None = None,
        linear_optimizer: Any = "Ftrl",
        dnn_feature_columns: Sequence[Any] | None = None,
        dnn_optimizer: Any = "Adagrad",
        dnn_hidden_units: Sequence[int] | None = None,
        dnn_activation_fn: Any = tf.nn.relu,
        dnn_dropout: float | None = None,
        n_classes: int = 2,
        weight_column: Any = None,
        label_vocabulary: Sequence[str] | None = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        head = heads.binary_or_multi_class_head(
            n_classes, weight_column, label_vocabulary, v1_loss_reduction(loss_reduction)
        )
        self._init_combined(
            head, model_dir, config, warm_start_from, linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units, dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )  # fmt: skip


class DNNLinearCombinedRegressor(_CombinedV1):
    """A wide-and-deep regressor as ``tf.compat.v1.estimator.DNNLinearCombinedRegressor``
    (TF 2.15's v1 class; see ``DNNLinearCombinedClassifier``).

    Args:
      model_dir: checkpoints and summaries.
      linear_feature_columns: the linear part's ``tf.feature_column`` columns.
      linear_optimizer: a name (Ftrl, ... at ``min(0.005, 1/sqrt(len(linear_feature_columns)))``),
        a ``tf.compat.v1.train.Optimizer`` or a callable returning one.
      dnn_feature_columns: the DNN's columns (dense ones).
      dnn_optimizer: a name (at 0.001), a ``tf.compat.v1.train.Optimizer`` or a callable.
      dnn_hidden_units: ints, the width of each hidden layer (required with DNN columns).
      dnn_activation_fn: the hidden layers' activation.
      dnn_dropout: None or the probability of dropping a coordinate in TRAIN.
      label_dimension: int, targets per example.
      weight_column: None, a feature key or a ``numeric_column``.
      input_layer_partitioner: partitioner of the DNN's input layer and of the linear
        model (default ``min_max_variable_partitioner(max_partitions=num_ps_replicas,
        min_slice_size=64 << 20)``).
      config: a ``tf_bridge.RunConfig``.
      warm_start_from: a checkpoint path or ``WarmStartSettings``.
      loss_reduction: a ``tf.compat.v1.losses.Reduction`` (default SUM).
      batch_norm: batch normalisation after each hidden layer.
      linear_sparse_combiner: ``'sum'``, ``'mean'`` or ``'sqrtn'``.

    Raises:
      ValueError: both column lists empty, a bad head argument or ``loss_reduction``; at
        train time a bad optimizer, DNN columns without ``dnn_hidden_units``.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        linear_feature_columns: Sequence[Any] | None = None,
        linear_optimizer: Any = "Ftrl",
        dnn_feature_columns: Sequence[Any] | None = None,
        dnn_optimizer: Any = "Adagrad",
        dnn_hidden_units: Sequence[int] | None = None,
        dnn_activation_fn: Any = tf.nn.relu,
        dnn_dropout: float | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        head = heads.regression_head(label_dimension, weight_column, v1_loss_reduction(loss_reduction))
        self._init_combined(
            head, model_dir, config, warm_start_from, linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units, dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )  # fmt: skip


class DNNLinearCombinedEstimator(_CombinedV1):
    """A wide-and-deep model under a head of your own, as
    ``tf.compat.v1.estimator.DNNLinearCombinedEstimator`` (TF 2.15's v1 class):
    ``DNNLinearCombinedClassifier``'s networks, TF1 optimizers, partitioners and checkpoint
    names, with ``head`` in place of the classifier's head. As TF 2.15's, it takes no
    ``warm_start_from``.

    Args:
      head: a v1 head (``tf_bridge.runtime.canned.v1.heads``; TF's private
        ``canned.head`` factories) or a v2 one (``tf_bridge.estimator.RegressionHead``,
        ...): both train, as in TF 2.15, since the optimizers run in the ``train_op_fn``
        this class gives the head.
      model_dir, linear_feature_columns, linear_optimizer, dnn_feature_columns,
      dnn_optimizer, dnn_hidden_units, dnn_activation_fn, dnn_dropout,
      input_layer_partitioner, config, batch_norm, linear_sparse_combiner: as
      ``DNNLinearCombinedClassifier``.

    Raises:
      ValueError: both column lists empty; at train time a bad optimizer, DNN columns
        without ``dnn_hidden_units``; what the head raises.
    """

    def __init__(
        self,
        head: Any,
        model_dir: str | os.PathLike[str] | None = None,
        linear_feature_columns: Sequence[Any] | None = None,
        linear_optimizer: Any = "Ftrl",
        dnn_feature_columns: Sequence[Any] | None = None,
        dnn_optimizer: Any = "Adagrad",
        dnn_hidden_units: Sequence[int] | None = None,
        dnn_activation_fn: Any = tf.nn.relu,
        dnn_dropout: float | None = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        self._init_combined(
            head, model_dir, config, None, linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units, dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )  # fmt: skip


def _dnn_linear_combined_model_fn(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Any,
    linear_feature_columns: Sequence[Any] | None = None,
    linear_optimizer: Any = "Ftrl",
    dnn_feature_columns: Sequence[Any] | None = None,
    dnn_optimizer: Any = "Adagrad",
    dnn_hidden_units: Sequence[int] | None = None,
    dnn_activation_fn: Any = tf.nn.relu,
    dnn_dropout: float | None = None,
    input_layer_partitioner: Any = None,
    config: Any = None,
    batch_norm: bool = False,
    linear_sparse_combiner: str = "sum",
) -> Any:
    """tensorflow_estimator's private v1 combined model_fn, with its arguments and defaults
    (programs called it directly): ``dnn_linear_combined_model_fn_v1``."""
    return dnn_linear_combined_model_fn_v1(
        features, labels, mode, head, config=config, linear_feature_columns=linear_feature_columns,
        linear_optimizer=linear_optimizer, dnn_feature_columns=dnn_feature_columns, dnn_optimizer=dnn_optimizer,
        dnn_hidden_units=dnn_hidden_units, dnn_activation_fn=dnn_activation_fn, dnn_dropout=dnn_dropout,
        input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
        linear_sparse_combiner=linear_sparse_combiner,
    )  # fmt: skip
