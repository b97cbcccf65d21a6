"""``tf.compat.v1.estimator.BaselineClassifier``, ``BaselineRegressor`` and
``BaselineEstimator`` (TF 2.15's v1 classes): one learned bias per logit, ``baseline/bias``,
trained by a TF1 optimizer (Ftrl at 0.3 by default; slots ``baseline/bias/Ftrl`` and
``baseline/bias/Ftrl_1``, as TF 2.15 wrote them)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned.baseline import weight_column_key
from tf_bridge.runtime.canned.v1 import heads
from tf_bridge.runtime.canned.v1.networks import baseline_logits_v1
from tf_bridge.runtime.canned.v1.optimizers import get_optimizer_instance
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.v1_forms import V1Methods, v1_loss_reduction

#: The learning rate of an optimizer given by name (TF 2.15's baseline).
LEARNING_RATE = 0.3
_V1_SUM = tf.compat.v1.losses.Reduction.SUM


def baseline_model_fn_v1(
    features: PyTree, labels: PyTree, mode: str, head: Any, optimizer: Any, weight_column: Any = None
) -> Any:
    """TF 2.15's v1 baseline model_fn: the bias's logits and the head's spec; TRAIN
    minimizes with ``get_optimizer_instance(optimizer, 0.3)``.

    Raises:
      TypeError: a bad weight_column, no feature to size the batch. ValueError: a bad optimizer.
    """
    logits = baseline_logits_v1(features, head.logits_dimension, weight_column_key(weight_column))

    def train_op_fn(loss: Any) -> Any:
        opt = get_optimizer_instance(optimizer, learning_rate=LEARNING_RATE)
        return opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())

    return head.create_estimator_spec(
        features=features, mode=mode, logits=logits, labels=labels, train_op_fn=train_op_fn
    )


class _BaselineV1(V1Methods, Estimator):
    def _init_baseline(
        self, head: Any, model_dir: Any, optimizer: Any, weight_column: Any, config: Any
    ) -> None:
        self._head = head

        def model_fn(features: PyTree, labels: PyTree, mode: str) -> Any:
            return baseline_model_fn_v1(features, labels, mode, head, optimizer, weight_column)

        super().__init__(model_fn=model_fn, model_dir=model_dir, config=config)


class BaselineClassifier(_BaselineV1):
    """``tf.compat.v1.estimator.BaselineClassifier`` (TF 2.15's v1 class): learns the prior
    of each class (its logits ignore the feature values).

    Args:
      model_dir: checkpoints and summaries.
      n_classes: int >= 2.
      weight_column: None, a feature key or a ``numeric_column`` of example weights.
      label_vocabulary: None or the label strings.
      optimizer: a name (at learning rate 0.3), a ``tf.compat.v1.train.Optimizer`` or a
        callable returning one (default ``'Ftrl'``).
      config: a ``tf_bridge.RunConfig``.
      loss_reduction: a ``tf.compat.v1.losses.Reduction`` (default SUM).

    Raises:
      ValueError: ``n_classes`` < 2, a bad ``loss_reduction`` or ``label_vocabulary``; at
        train time a bad optimizer.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        n_classes: int = 2,
        weight_column: Any = None,
        label_vocabulary: Sequence[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        loss_reduction: str = _V1_SUM,
    ) -> None:
        head = heads.binary_or_multi_class_head(
            n_classes, weight_column, label_vocabulary, v1_loss_reduction(loss_reduction)
        )
        self._init_baseline(head, model_dir, optimizer, weight_column, config)


class BaselineRegressor(_BaselineV1):
    """``tf.compat.v1.estimator.BaselineRegressor`` (TF 2.15's v1 class): learns the mean
    label (see ``BaselineClassifier``).

    Args:
      label_dimension: int, regression targets per example.
      the rest: as ``BaselineClassifier``.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        loss_reduction: str = _V1_SUM,
    ) -> None:
        head = heads.regression_head(label_dimension, weight_column, v1_loss_reduction(loss_reduction))
        self._init_baseline(head, model_dir, optimizer, weight_column, config)


class BaselineEstimator(_BaselineV1):
    """``tf.compat.v1.estimator.BaselineEstimator`` (TF 2.15's v1 class) over ``head``: the
    head's TRAIN runs the TF1 optimizer through ``train_op_fn``.

    Args:
      head: a v1 head (``tf_bridge.runtime.canned.v1.heads``: TF 2.15's private
        ``canned.head`` factories, as its v1 class took) or a ``tf_bridge.estimator`` (v2)
        head: both train, as in TF 2.15.
      model_dir, optimizer, config: as ``BaselineClassifier``.
    """

    def __init__(
        self,
        head: Any,
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
    ) -> None:
        self._init_baseline(head, model_dir, optimizer, None, config)
