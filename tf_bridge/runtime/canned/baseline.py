"""``BaselineClassifier``, ``BaselineRegressor`` and ``BaselineEstimator`` (tf.estimator 2.15's
v2 forms) on tf_bridge: models that ignore the feature values and learn one bias per logit.

The bias is the variable ``baseline/bias`` (``[logits_dimension]``, zeros at first) and the
optimizer's slots are ``training/<Optimizer>/baseline/bias/<slot>``, TF 2.15's names, so a
model_dir written by TF 2.15's baseline estimator is evaluated, predicted from and trained
further here with the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned import _heads
from tf_bridge.runtime.canned.dnn import SUM_OVER_BATCH_SIZE
from tf_bridge.runtime.canned.optimizers import get_optimizer_instance_v2
from tf_bridge.runtime.heads.base import Head
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator

# The learning rate of an optimizer given by name (TF 2.15's baseline model).
LEARNING_RATE = 0.3


def weight_column_key(weight_column: Any) -> str | None:
    """The feature key of ``weight_column``: None, the str itself, or a numeric column's key.

    Raises:
      TypeError: neither None, a str nor a ``tf.feature_column.numeric_column``.
    """
    if weight_column is None or isinstance(weight_column, str):
        return weight_column
    numeric = type(tf.feature_column.numeric_column("_"))
    if not isinstance(weight_column, numeric):
        raise TypeError(
            "weight_column must be a str or a tf.feature_column.numeric_column; "
            f"got {type(weight_column).__name__}."
        )
    return str(weight_column.key)


def baseline_logits(features: PyTree, logits_dimension: int, weight_key: str | None) -> tuple[Any, Any]:
    """``(bias, logits)``: the variable ``baseline/bias`` (float32 ``[logits_dimension]``,
    zeros) and ``logits`` = the bias repeated over the batch (``[batch, logits_dimension]``).

    The batch size is the first dimension of the first feature other than the weight; at
    run time every other such feature must have the same first dimension.

    Raises:
      AttributeError: features is not a dict (TF 2.15 raised the same, from ``.items()``).
      TypeError: no feature other than the weight (no batch size; TF 2.15 raised TypeError).
      tf.errors.InvalidArgumentError: (run time) features of different batch sizes.
    """
    sizes = [tf.compat.v1.shape(value)[0] for key, value in features.items() if key != weight_key]
    if not sizes:
        raise TypeError(
            f"a baseline model needs a feature other than the weight to size its batch; got keys {sorted(features)}."
        )
    checks = [tf.compat.v1.debugging.assert_equal(sizes[0], size) for size in sizes[1:]]
    with tf.name_scope("baseline") as scope:
        # Outside the checks' control dependencies, so that initialising the bias does not
        # read the input (TF 2.15's did: from scratch with two features it failed, see
        # docs/decisions.md).
        bias = tf.Variable(initial_value=tf.zeros([logits_dimension]), name="bias")
    with tf.control_dependencies(checks), tf.name_scope(scope):
        logits = tf.math.multiply(bias, tf.ones([sizes[0], logits_dimension]))
    return bias, logits


def baseline_model_fn(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Head,
    optimizer: Any = "Ftrl",
    weight_column: Any = None,
) -> Any:
    """The baseline canned model_fn: ``baseline_logits`` under ``head``. An optimizer given by
    name gets learning rate 0.3; in TRAIN its ``iterations`` is the global step, so each step
    adds one to it.

    Raises:
      as ``baseline_logits`` and ``weight_column_key``; ValueError: a bad optimizer
      (``get_optimizer_instance_v2``), or what the head raises.
    """
    bias, logits = baseline_logits(features, head.logits_dimension, weight_column_key(weight_column))
    train_op_fn = None
    if mode == ModeKeys.TRAIN:
        opt = get_optimizer_instance_v2(optimizer, learning_rate=LEARNING_RATE)
        opt.iterations = tf.compat.v1.train.get_or_create_global_step()

        def train_op_fn(loss: tf.Tensor) -> Any:
            return opt.get_updates(loss, [bias])[0]

    return head.create_estimator_spec(
        features=features, mode=mode, logits=logits, labels=labels, train_op_fn=train_op_fn
    )


class _BaselineBase(Estimator):
    def _init_baseline(
        self,
        head: Head,
        optimizer: Any,
        weight_column: Any,
        model_dir: str | os.PathLike[str] | None,
        config: Any,
    ) -> None:
        self._head = head

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            del config
            return baseline_model_fn(features, labels, mode, head, optimizer, weight_column)

        super().__init__(model_fn=model_fn, model_dir=model_dir, config=config)


class BaselineClassifier(_BaselineBase):
    """A classifier that ignores the features and learns the labels' class distribution
    (``tf.estimator.BaselineClassifier``, TF 2.15's v2 form): the logits are one bias per
    class (one for ``n_classes=2``), so ``probabilities`` tends to the classes' frequencies.

    Args:
      model_dir: checkpoints and summaries (as ``tf_bridge.Estimator``).
      n_classes: int >= 2; 2 gives a binary (logistic) head, more a softmax one.
      weight_column: None, a feature key or a ``numeric_column`` giving per-example loss
        weights. (TF 2.15's v2 class raised TypeError at train time for a numeric_column;
        here it works as a str would.)
      label_vocabulary: None (labels are int class ids in ``[0, n_classes)``) or the
        ``n_classes`` strings the labels are.
      optimizer: ``'Ftrl'`` (the default) or another name (learning rate 0.3), a
        ``tf_keras.optimizers.legacy.Optimizer``, or a callable returning one.
      config: a ``tf_bridge.RunConfig``.
      loss_reduction: a ``tf.keras.losses.Reduction`` value other than ``'none'``
        (default ``'sum_over_batch_size'``).

    The features must be a dict of tensors, each ``[batch, ...]`` (their values are not
    read; every one but the weight must have the same batch size).

    Raises:
      ValueError: ``n_classes`` < 2, a bad label_vocabulary or loss_reduction (by the
        head); at train time an unknown optimizer name.
      TypeError: (train, evaluate, predict) a weight_column of another type, or no
        feature but the weight.
      AttributeError: features that are not a dict, as TF 2.15.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        n_classes: int = 2,
        weight_column: Any = None,
        label_vocabulary: Sequence[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
    ) -> None:
        head = _heads.binary_or_multi_class_head(n_classes, weight_column, label_vocabulary, loss_reduction)
        self._init_baseline(head, optimizer, weight_column, model_dir, config)


class BaselineRegressor(_BaselineBase):
    """A regressor that ignores the features and learns the labels' mean
    (``tf.estimator.BaselineRegressor``, TF 2.15's v2 form).

    Args:
      model_dir, weight_column, optimizer, config, loss_reduction: as ``BaselineClassifier``.
      label_dimension: int, regression targets per example (labels ``[batch,
        label_dimension]``).

    Raises:
      ValueError: a bad label_dimension or loss_reduction (by the head); at train time an
        unknown optimizer name.
      TypeError: no feature at all.
      AttributeError: features that are not a dict, as TF 2.15.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
    ) -> None:
        head = _heads.regression_head(label_dimension, weight_column, loss_reduction)
        # TF 2.15's regressor counts the weight feature among those that size the batch.
        self._init_baseline(head, optimizer, None, model_dir, config)


class BaselineEstimator(_BaselineBase):
    """A bias-only model under a head of your own (``tf.estimator.BaselineEstimator``, TF
    2.15's v2 form), e.g. ``BaselineEstimator(tf_bridge.estimator.MultiLabelHead(3))``
    learns each label's frequency.

    Args:
      head: a ``tf_bridge.estimator`` head (``Head``); its ``logits_dimension`` sizes the bias
        and its ``weight_column``, if any, must be a feature.
      model_dir, optimizer, config: as ``BaselineClassifier``.

    Raises:
      ValueError: at train time an unknown optimizer name; what the head raises.
      AttributeError: features that are not a dict, as TF 2.15.
    """

    def __init__(
        self,
        head: Head,
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
    ) -> None:
        self._init_baseline(head, optimizer, None, model_dir, config)


# tensorflow_estimator's module defined the v2 classes as ``...V2`` (the plain names were v1);
# these are the v2 classes under both (see tf_bridge.runtime.import_compat).
BaselineClassifierV2 = BaselineClassifier
BaselineRegressorV2 = BaselineRegressor
BaselineEstimatorV2 = BaselineEstimator
