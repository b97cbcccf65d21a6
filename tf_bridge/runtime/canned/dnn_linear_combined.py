"""``DNNLinearCombinedClassifier``, ``DNNLinearCombinedRegressor`` and
``DNNLinearCombinedEstimator`` (tf.estimator 2.15's v2 forms, "wide and deep") on tf_bridge:
the logits are the DNN's plus the linear model's, each part trained by its own optimizer on
the same loss; the classes differ only by their head."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned import _heads
from tf_bridge.runtime.canned._layers import dnn_logits, linear_logits
from tf_bridge.runtime.canned.dnn import SUM_OVER_BATCH_SIZE, check_features
from tf_bridge.runtime.canned.linear import check_sparse_combiner
from tf_bridge.runtime.canned.optimizers import get_optimizer_instance_v2
from tf_bridge.runtime.heads.base import Head
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.zero_fraction import zero_fraction

# Learning rates of optimizers given by name: the DNN's, and the cap of the linear
# part's (which is min(cap, 1 / sqrt(number of linear columns))).
DNN_LEARNING_RATE = 0.001
LINEAR_LEARNING_RATE = 0.005


def linear_learning_rate(num_linear_feature_columns: int) -> float:
    """The learning rate of a linear optimizer given by name."""
    return min(LINEAR_LEARNING_RATE, 1.0 / math.sqrt(num_linear_feature_columns))


def check_feature_columns(linear_feature_columns: Any, dnn_feature_columns: Any) -> list[Any]:
    """Raises ValueError when both lists are empty."""
    columns = list(linear_feature_columns or []) + list(dnn_feature_columns or [])
    if not columns:
        raise ValueError("linear_feature_columns and dnn_feature_columns are both empty; give at least one.")
    return columns


def dnn_linear_combined_model_fn(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Head,
    linear_feature_columns: Sequence[Any] = (),
    linear_optimizer: Any = "Ftrl",
    dnn_feature_columns: Sequence[Any] = (),
    dnn_optimizer: Any = "Adagrad",
    dnn_hidden_units: Sequence[int] | None = None,
    dnn_activation_fn: Any = tf.nn.relu,
    dnn_dropout: float | None = None,
    batch_norm: bool = False,
    linear_sparse_combiner: str = "sum",
) -> Any:
    """The combined model_fn. In TRAIN the head's ``train_op_fn`` applies the DNN optimizer
    (with batch norm's updates) and then the linear one; the global step is the DNN
    optimizer's ``iterations`` (the linear one's when there is no DNN), so it grows by one
    per step while the other optimizer counts in its own ``iter`` variable.

    Raises:
      ValueError: features not a dict, both column lists empty, DNN columns without
        ``dnn_hidden_units``, a bad optimizer.
    """
    check_features(features)
    check_feature_columns(linear_feature_columns, dnn_feature_columns)
    train = mode == ModeKeys.TRAIN
    parts = []  # (logits, optimizer, variables, update_ops)
    if dnn_feature_columns:
        if not dnn_hidden_units:
            raise ValueError("dnn_hidden_units must be given when dnn_feature_columns are.")
        opt = get_optimizer_instance_v2(dnn_optimizer, learning_rate=DNN_LEARNING_RATE) if train else None
        logits, variables, updates = dnn_logits(
            head.logits_dimension,
            dnn_hidden_units,
            dnn_feature_columns,
            dnn_activation_fn,
            dnn_dropout,
            batch_norm,
            features,
            mode,
        )
        parts.append((logits, opt, variables, updates))
    if linear_feature_columns:
        opt = None
        if train:
            opt = get_optimizer_instance_v2(
                linear_optimizer, learning_rate=linear_learning_rate(len(linear_feature_columns))
            )
        logits, variables = linear_logits(
            head.logits_dimension, linear_feature_columns, linear_sparse_combiner, features
        )
        tf.compat.v1.summary.scalar("linear/fraction_of_zero_values", zero_fraction(logits))
        tf.compat.v1.summary.histogram("linear/activation", logits)
        parts.append((logits, opt, variables, []))
    logits = parts[0][0] if len(parts) == 1 else parts[0][0] + parts[1][0]

    def train_op_fn(loss: tf.Tensor) -> Any:
        ops = []
        for _, opt, variables, updates in parts:
            ops.extend(opt.get_updates(loss, variables))
            ops.extend(updates)
        return tf.group(*ops)

    if train:
        parts[0][1].iterations = tf.compat.v1.train.get_or_create_global_step()
    return head.create_estimator_spec(
        features=features, mode=mode, labels=labels, train_op_fn=train_op_fn, logits=logits
    )


class _CombinedBase(Estimator):
    def _init_combined(
        self,
        head: Head,
        model_dir: str | os.PathLike[str] | None,
        config: Any,
        warm_start_from: Any,
        **kwargs: Any,
    ) -> None:
        check_feature_columns(kwargs["linear_feature_columns"], kwargs["dnn_feature_columns"])
        check_sparse_combiner(kwargs["linear_sparse_combiner"])
        kwargs["linear_feature_columns"] = tuple(kwargs["linear_feature_columns"] or [])
        kwargs["dnn_feature_columns"] = tuple(kwargs["dnn_feature_columns"] or [])
        self._head = head

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            del config
            return dnn_linear_combined_model_fn(features, labels, mode, head, **kwargs)

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class DNNLinearCombinedClassifier(_CombinedBase):
    """A linear model and a DNN summed into one classifier
    (``tf.estimator.DNNLinearCombinedClassifier``, TF 2.15's v2 form), with TF 2.15's
    variable and slot names under ``linear/`` and ``dnn/``.

    Args:
      model_dir, n_classes, weight_column, label_vocabulary, config, warm_start_from,
      loss_reduction, batch_norm: as ``DNNClassifier``.
      linear_feature_columns: columns of the linear part (may be empty).
      linear_optimizer: as ``LinearClassifier``'s optimizer (default ``'Ftrl'``); a name
        gets learning rate ``min(0.005, 1/sqrt(len(linear_feature_columns)))``.
      dnn_feature_columns: columns of the DNN part (may be empty).
      dnn_optimizer: as ``DNNClassifier``'s optimizer (default ``'Adagrad'``); a name gets
        learning rate 0.001.
      dnn_hidden_units, dnn_activation_fn, dnn_dropout: the DNN's ``hidden_units``,
        ``activation_fn``, ``dropout``.
      linear_sparse_combiner: the linear part's ``sparse_combiner``.

    Raises:
      ValueError: both column lists empty, ``n_classes`` < 2, a bad label_vocabulary or
        loss_reduction (by the head), a bad linear_sparse_combiner; at train time a bad
        optimizer or DNN columns without ``dnn_hidden_units``.
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
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        check_feature_columns(linear_feature_columns, dnn_feature_columns)
        head = _heads.binary_or_multi_class_head(n_classes, weight_column, label_vocabulary, loss_reduction)
        self._init_combined(
            head,
            model_dir,
            config,
            warm_start_from,
            linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer,
            dnn_feature_columns=dnn_feature_columns,
            dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units,
            dnn_activation_fn=dnn_activation_fn,
            dnn_dropout=dnn_dropout,
            batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )


class DNNLinearCombinedRegressor(_CombinedBase):
    """A linear model and a DNN summed into one regressor
    (``tf.estimator.DNNLinearCombinedRegressor``, TF 2.15's v2 form).

    Args:
      as ``DNNLinearCombinedClassifier``, with ``label_dimension`` (int, targets per
      example) in place of ``n_classes`` and ``label_vocabulary``.

    Raises:
      ValueError: both column lists empty, a bad label_dimension or loss_reduction (by the
        head), a bad linear_sparse_combiner; at train time a bad optimizer or DNN columns
        without ``dnn_hidden_units``.
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
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        check_feature_columns(linear_feature_columns, dnn_feature_columns)
        head = _heads.regression_head(label_dimension, weight_column, loss_reduction)
        self._init_combined(
            head,
            model_dir,
            config,
            warm_start_from,
            linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer,
            dnn_feature_columns=dnn_feature_columns,
            dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units,
            dnn_activation_fn=dnn_activation_fn,
            dnn_dropout=dnn_dropout,
            batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )


class DNNLinearCombinedEstimator(_CombinedBase):
    """A linear model and a DNN summed under a head of your own
    (``tf.estimator.DNNLinearCombinedEstimator``, TF 2.15's v2 form): the networks,
    optimizers and checkpoint names of ``DNNLinearCombinedClassifier``, with ``head`` in
    place of the classifier's head. As TF 2.15's, it takes no ``warm_start_from``.

    Args:
      head: a ``tf_bridge.estimator`` head (``Head``); its ``logits_dimension`` is the
        number of logits per example of each part.
      model_dir, linear_feature_columns, linear_optimizer, dnn_feature_columns,
      dnn_optimizer, dnn_hidden_units, dnn_activation_fn, dnn_dropout, config, batch_norm,
      linear_sparse_combiner: as ``DNNLinearCombinedClassifier``.

    Raises:
      ValueError: both column lists empty, a bad linear_sparse_combiner; at train time a
        bad optimizer or DNN columns without ``dnn_hidden_units``; what the head raises.
    """

    def __init__(
        self,
        head: Head,
        model_dir: str | os.PathLike[str] | None = None,
        linear_feature_columns: Sequence[Any] | None = None,
        linear_optimizer: Any = "Ftrl",
        dnn_feature_columns: Sequence[Any] | None = None,
        dnn_optimizer: Any = "Adagrad",
        dnn_hidden_units: Sequence[int] | None = None,
        dnn_activation_fn: Any = tf.nn.relu,
        dnn_dropout: float | None = None,
        config: RunConfig | None = None,
        batch_norm: bool = False,
        linear_sparse_combiner: str = "sum",
    ) -> None:
        self._init_combined(
            head,
            model_dir,
            config,
            None,
            linear_feature_columns=linear_feature_columns,
            linear_optimizer=linear_optimizer,
            dnn_feature_columns=dnn_feature_columns,
            dnn_optimizer=dnn_optimizer,
            dnn_hidden_units=dnn_hidden_units,
            dnn_activation_fn=dnn_activation_fn,
            dnn_dropout=dnn_dropout,
            batch_norm=batch_norm,
            linear_sparse_combiner=linear_sparse_combiner,
        )


# tensorflow_estimator's module defined the v2 classes as ``...V2`` (the plain names were v1);
# these are the v2 classes under both (see tf_bridge.runtime.import_compat).
DNNLinearCombinedClassifierV2 = DNNLinearCombinedClassifier
DNNLinearCombinedRegressorV2 = DNNLinearCombinedRegressor
DNNLinearCombinedEstimatorV2 = DNNLinearCombinedEstimator
