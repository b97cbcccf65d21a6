"""``tf.compat.v1.estimator.DNNClassifier``, ``DNNRegressor`` and ``DNNEstimator`` (TF 2.15's
v1 classes; they differ only by their head).

TF1 optimizers (Adagrad at 0.05 by default), slots ``<variable>/...``; the network in the
variable scope ``dnn`` partitioned by ``min_max_variable_partitioner(max_partitions=
num_ps_replicas)``, its input layer by ``input_layer_partitioner`` (default: the same with
64 MiB slices). As in TF 2.15 the optimizer runs inside the ``dnn`` scope, which gives the
slot keys TF 2.15 wrote for partitioned variables: ``<variable>/t_0/Adagrad``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned.dnn import check_features
from tf_bridge.runtime.canned.v1 import heads
from tf_bridge.runtime.canned.v1.networks import (
    INPUT_LAYER_MIN_SLICE_SIZE,
    default_partitioner,
    dnn_logits_v1,
)
from tf_bridge.runtime.canned.v1.optimizers import get_optimizer_instance
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.v1_forms import V1Methods, v1_loss_reduction

#: The learning rate of an optimizer given by name (TF 2.15's v1 DNN).
LEARNING_RATE = 0.05
_V1_SUM = tf.compat.v1.losses.Reduction.SUM


def num_ps_replicas(config: Any) -> int:
    """The config's parameter servers (0 without a config)."""
    return int(getattr(config, "num_ps_replicas", 0) or 0) if config is not None else 0


def dnn_model_fn_v1(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Any,
    hidden_units: Sequence[int],
    feature_columns: Sequence[Any],
    optimizer: Any = "Adagrad",
    activation_fn: Any = tf.nn.relu,
    dropout: float | None = None,
    input_layer_partitioner: Any = None,
    config: Any = None,
    batch_norm: bool = False,
) -> Any:
    """TF 2.15's v1 DNN model_fn: the network and the head's spec, both in the partitioned
    variable scope ``dnn``.

    Raises:
      ValueError: a bad optimizer (``get_optimizer_instance``), features not a dict.
    """
    optimizer = get_optimizer_instance(optimizer, learning_rate=LEARNING_RATE)
    check_features(features)
    ps = num_ps_replicas(config)
    with tf.compat.v1.variable_scope(
        "dnn", values=tuple(features.values()), partitioner=default_partitioner(ps)
    ):
        logits = dnn_logits_v1(
            head.logits_dimension,
            hidden_units,
            feature_columns,
            activation_fn,
            dropout,
            input_layer_partitioner or default_partitioner(ps, INPUT_LAYER_MIN_SLICE_SIZE),
            batch_norm,
            features,
            mode,
        )
        return head.create_estimator_spec(
            features=features, mode=mode, labels=labels, optimizer=optimizer, logits=logits
        )


class _DNNV1(V1Methods, Estimator):
    def _init_dnn(self, head: Any, model_dir: Any, config: Any, warm_start_from: Any, **kwargs: Any) -> None:
        self._head = head
        kwargs["feature_columns"] = tuple(kwargs["feature_columns"] or [])

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            return dnn_model_fn_v1(features, labels, mode, head, config=config, **kwargs)

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class DNNClassifier(_DNNV1):
    """A feed-forward network classifier as ``tf.compat.v1.estimator.DNNClassifier`` (TF
    2.15's v1 class): TF1 optimizers and slot names, partitioned variables, v1 summaries
    and metrics, so a model_dir TF 2.15's v1 class wrote is resumed with its optimizer state.

    Args:
      hidden_units: ints, the width of each hidden layer.
      feature_columns: ``tf.feature_column`` columns the network reads.
      model_dir: checkpoints and summaries.
      n_classes: int >= 2 (2: a logistic head, more: softmax).
      weight_column: None, a feature key or a ``numeric_column`` of example weights.
      label_vocabulary: None (int labels in ``[0, n_classes)``) or the label strings.
      optimizer: a name (``'Adagrad'``, ``'Adam'``, ``'Ftrl'``, ``'RMSProp'``, ``'SGD'``, at
        learning rate 0.05), a ``tf.compat.v1.train.Optimizer`` or a callable returning one.
      activation_fn: the hidden layers' activation.
      dropout: None or the probability of dropping a coordinate in TRAIN.
      input_layer_partitioner: partitioner of the input layer's variables (default
        ``min_max_variable_partitioner(max_partitions=num_ps_replicas, min_slice_size=64 << 20)``).
      config: a ``tf_bridge.RunConfig``.
      warm_start_from: a checkpoint path or ``WarmStartSettings``.
      loss_reduction: a ``tf.compat.v1.losses.Reduction`` (default SUM: the loss of a batch
        is the weighted sum of its examples' losses).
      batch_norm: batch normalisation after each hidden layer.

    Raises:
      ValueError: ``n_classes`` < 2, a bad ``loss_reduction`` or ``label_vocabulary``; at
        train time a bad optimizer.
    """

    def __init__(
        self,
        hidden_units: Sequence[int],
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        n_classes: int = 2,
        weight_column: Any = None,
        label_vocabulary: Sequence[str] | None = None,
        optimizer: Any = "Adagrad",
        activation_fn: Any = tf.nn.relu,
        dropout: float | None = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        batch_norm: bool = False,
    ) -> None:
        head = heads.binary_or_multi_class_head(
            n_classes, weight_column, label_vocabulary, v1_loss_reduction(loss_reduction)
        )
        self._init_dnn(
            head, model_dir, config, warm_start_from, hidden_units=hidden_units, feature_columns=feature_columns,
            optimizer=optimizer, activation_fn=activation_fn, dropout=dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
        )  # fmt: skip


class DNNRegressor(_DNNV1):
    """A feed-forward network regressor as ``tf.compat.v1.estimator.DNNRegressor`` (TF
    2.15's v1 class; see ``DNNClassifier``).

    Args:
      label_dimension: int, regression targets per example (labels ``[batch, label_dimension]``).
      the rest: as ``DNNClassifier``.

    Raises:
      ValueError: a bad ``label_dimension`` or ``loss_reduction``; at train time a bad optimizer.
    """

    def __init__(
        self,
        hidden_units: Sequence[int],
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        optimizer: Any = "Adagrad",
        activation_fn: Any = tf.nn.relu,
        dropout: float | None = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        batch_norm: bool = False,
    ) -> None:
        head = heads.regression_head(label_dimension, weight_column, v1_loss_reduction(loss_reduction))
        self._init_dnn(
            head, model_dir, config, warm_start_from, hidden_units=hidden_units, feature_columns=feature_columns,
            optimizer=optimizer, activation_fn=activation_fn, dropout=dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
        )  # fmt: skip


class DNNEstimator(_DNNV1):
    """A feed-forward network under a head of your own, as
    ``tf.compat.v1.estimator.DNNEstimator`` (TF 2.15's v1 class): ``DNNClassifier``'s
    network, TF1 optimizer, partitioners and checkpoint names, with ``head`` in place of
    the classifier's head.

    Args:
      head: a v1 head (``tensorflow_estimator.python.estimator.canned.head``'s factories,
        ``tf_bridge.runtime.canned.v1.heads``), whose TRAIN minimizes with the TF1
        optimizer. A v2 head (``tf_bridge.estimator.RegressionHead``, ...) evaluates and
        predicts, and raises ValueError at train time, as in TF 2.15 (it takes Keras
        optimizers only).
      hidden_units, feature_columns, model_dir, optimizer, activation_fn, dropout,
      input_layer_partitioner, config, warm_start_from, batch_norm: as ``DNNClassifier``.

    Raises:
      ValueError: at train time a bad optimizer, or a v2 head; what the head raises.
    """

    def __init__(
        self,
        head: Any,
        hidden_units: Sequence[int],
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Adagrad",
        activation_fn: Any = tf.nn.relu,
        dropout: float | None = None,
        input_layer_partitioner: Any = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        batch_norm: bool = False,
    ) -> None:
        self._init_dnn(
            head, model_dir, config, warm_start_from, hidden_units=hidden_units, feature_columns=feature_columns,
            optimizer=optimizer, activation_fn=activation_fn, dropout=dropout,
            input_layer_partitioner=input_layer_partitioner, batch_norm=batch_norm,
        )  # fmt: skip


# tensorflow_estimator's private name of the v1 DNN model_fn, which programs (and its own
# tests) called directly.
_dnn_model_fn = dnn_model_fn_v1
