"""``DNNClassifier``, ``DNNRegressor`` and ``DNNEstimator`` (tf.estimator 2.15's v2 forms) on
tf_bridge: the classes differ only by the head over the same network."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned import _heads
from tf_bridge.runtime.canned._layers import dnn_logits
from tf_bridge.runtime.canned.optimizers import get_optimizer_instance_v2
from tf_bridge.runtime.heads.base import Head
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator

SUM_OVER_BATCH_SIZE = "sum_over_batch_size"


def check_features(features: PyTree) -> None:
    """Raises ValueError unless the features are a dict of tensors (as TF 2.15)."""
    if not isinstance(features, dict):
        raise ValueError(f"features must be a dict of Tensors, got {type(features).__name__}.")


def dnn_model_fn(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Head,
    hidden_units: Sequence[int],
    feature_columns: Sequence[Any],
    optimizer: Any = "Adagrad",
    activation_fn: Any = tf.nn.relu,
    dropout: float | None = None,
    batch_norm: bool = False,
) -> Any:
    """The DNN canned model_fn: the network of ``_layers.dnn_model_class()`` under ``head``; in TRAIN
    the Keras optimizer's ``iterations`` is the global step, so each step adds one to it.

    Raises:
      ValueError: features not a dict, a bad optimizer (``get_optimizer_instance_v2``).
    """
    check_features(features)
    logits, variables, update_ops = dnn_logits(
        head.logits_dimension,
        hidden_units,
        feature_columns,
        activation_fn,
        dropout,
        batch_norm,
        features,
        mode,
    )
    if mode == ModeKeys.TRAIN:
        optimizer = get_optimizer_instance_v2(optimizer)
        optimizer.iterations = tf.compat.v1.train.get_or_create_global_step()
    else:
        optimizer = None
    return head.create_estimator_spec(
        features=features,
        mode=mode,
        labels=labels,
        optimizer=optimizer,
        logits=logits,
        trainable_variables=variables,
        update_ops=update_ops,
    )


class _DNNBase(Estimator):
    def _init_dnn(
        self,
        head: Head,
        hidden_units: Any,
        feature_columns: Any,
        optimizer: Any,
        activation_fn: Any,
        dropout: Any,
        batch_norm: bool,
        model_dir: str | os.PathLike[str] | None,
        config: Any,
        warm_start_from: Any,
    ) -> None:
        columns = tuple(feature_columns or [])
        self._head = head

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            del config
            return dnn_model_fn(
                features,
                labels,
                mode,
                head,
                hidden_units,
                columns,
                optimizer,
                activation_fn,
                dropout,
                batch_norm,
            )

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class DNNClassifier(_DNNBase):
    """A feed-forward network classifier (``tf.estimator.DNNClassifier``, TF 2.15's v2 form).

    Variables and optimizer slots carry TF 2.15's names, so a model_dir its DNNClassifier
    wrote is evaluated, predicted from and trained on as TF 2.15 would.

    Args:
      hidden_units: ints, the width of each hidden layer (``[64, 32]``: two layers).
      feature_columns: ``tf.feature_column`` columns (v2) the network reads.
      model_dir: checkpoints and summaries (as ``tf_bridge.Estimator``).
      n_classes: int >= 2; 2 gives a binary (logistic) head, more a softmax one.
      weight_column: None, a feature key or a ``numeric_column`` giving per-example loss
        weights.
      label_vocabulary: None (labels are int class ids in ``[0, n_classes)``) or the
        ``n_classes`` strings the labels are.
      optimizer: a name (``'Adagrad'``, ``'Adam'``, ``'Ftrl'``, ``'RMSProp'``, ``'SGD'``, with
        the optimizer's default learning rate), a ``tf_keras.optimizers.legacy.Optimizer``
        or a callable returning one. TF 2.15's ``tf.keras.optimizers.legacy`` classes are
        ``tf_keras.optimizers.legacy`` on TF >= 2.16.
      activation_fn: the hidden layers' activation (``tf.nn.relu``).
      dropout: None, or the probability of dropping a coordinate in TRAIN.
      config: a ``tf_bridge.RunConfig``.
      warm_start_from: a checkpoint path or ``tf_bridge.WarmStartSettings``.
      loss_reduction: a ``tf.keras.losses.Reduction`` value other than ``'none'``
        (default ``'sum_over_batch_size'``).
      batch_norm: batch normalisation after each hidden layer.

    Raises:
      ValueError: ``n_classes`` < 2, a bad ``label_vocabulary`` or ``loss_reduction`` (by
        the head); at train time an unknown optimizer name.
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
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        batch_norm: bool = False,
    ) -> None:
        head = _heads.binary_or_multi_class_head(n_classes, weight_column, label_vocabulary, loss_reduction)
        self._init_dnn(
            head,
            hidden_units,
            feature_columns,
            optimizer,
            activation_fn,
            dropout,
            batch_norm,
            model_dir,
            config,
            warm_start_from,
        )


class DNNRegressor(_DNNBase):
    """A feed-forward network regressor (``tf.estimator.DNNRegressor``, TF 2.15's v2 form).

    Args:
      hidden_units, feature_columns, model_dir, weight_column, optimizer, activation_fn,
      dropout, config, warm_start_from, loss_reduction, batch_norm: as ``DNNClassifier``.
      label_dimension: int, the number of regression targets per example (labels
        ``[batch, label_dimension]``).

    Raises:
      ValueError: a bad ``label_dimension`` or ``loss_reduction`` (by the head); at train
        time an unknown optimizer name.
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
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        batch_norm: bool = False,
    ) -> None:
        head = _heads.regression_head(label_dimension, weight_column, loss_reduction)
        self._init_dnn(
            head,
            hidden_units,
            feature_columns,
            optimizer,
            activation_fn,
            dropout,
            batch_norm,
            model_dir,
            config,
            warm_start_from,
        )


class DNNEstimator(_DNNBase):
    """A feed-forward network under a head of your own (``tf.estimator.DNNEstimator``, TF
    2.15's v2 form): the network, optimizer and checkpoint names of ``DNNClassifier``, with
    ``head`` in place of the classifier's head, e.g.
    ``DNNEstimator(tf_bridge.estimator.MultiLabelHead(3), [8], columns)``.

    Args:
      head: a ``tf_bridge.estimator`` head (``Head``); its ``logits_dimension`` is the
        width of the logits layer (``[batch, logits_dimension]``).
      hidden_units, feature_columns, model_dir, optimizer, activation_fn, dropout, config,
      warm_start_from, batch_norm: as ``DNNClassifier``.

    Raises:
      ValueError: at train time an unknown optimizer name, or an optimizer the head cannot
        use (a ``tf.compat.v1.train`` optimizer: the v2 heads take Keras ones); what the
        head raises.
    """

    def __init__(
        self,
        head: Head,
        hidden_units: Sequence[int],
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Adagrad",
        activation_fn: Any = tf.nn.relu,
        dropout: float | None = None,
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        batch_norm: bool = False,
    ) -> None:
        self._init_dnn(
            head,
            hidden_units,
            feature_columns,
            optimizer,
            activation_fn,
            dropout,
            batch_norm,
            model_dir,
            config,
            warm_start_from,
        )


# tensorflow_estimator's module defined the v2 classes as ``...V2`` (the plain names were v1);
# these are the v2 classes under both (see tf_bridge.runtime.import_compat).
DNNClassifierV2 = DNNClassifier
DNNRegressorV2 = DNNRegressor
DNNEstimatorV2 = DNNEstimator
