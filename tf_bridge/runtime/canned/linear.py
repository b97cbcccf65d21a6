"""``LinearClassifier``, ``LinearRegressor`` and ``LinearEstimator`` (tf.estimator 2.15's v2
forms) on tf_bridge: the classes differ only by the head over the same model."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned import _heads
from tf_bridge.runtime.canned._layers import linear_logits
from tf_bridge.runtime.canned.dnn import SUM_OVER_BATCH_SIZE, check_features
from tf_bridge.runtime.canned.optimizers import get_optimizer_instance_v2
from tf_bridge.runtime.heads.base import Head
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator

# The learning rate of an optimizer given by name, and the cap of the default Ftrl's
# (TF 2.15's linear model).
LEARNING_RATE = 0.2
SPARSE_COMBINERS = ("mean", "sqrtn", "sum")


def default_linear_optimizer(feature_columns: Sequence[Any]) -> Any:
    """``optimizer=None``: Ftrl with learning rate ``min(0.2, 1 / sqrt(len(feature_columns)))``."""
    from tf_bridge.runtime.canned.optimizers import optimizer_classes

    return optimizer_classes()["Ftrl"](
        learning_rate=min(LEARNING_RATE, 1.0 / math.sqrt(len(feature_columns)))
    )


def check_sparse_combiner(sparse_combiner: str) -> str:
    """Raises ValueError unless ``sparse_combiner`` is ``'mean'``, ``'sqrtn'`` or ``'sum'``."""
    if sparse_combiner not in SPARSE_COMBINERS:
        raise ValueError(f"sparse_combiner must be one of {SPARSE_COMBINERS}, got {sparse_combiner!r}.")
    return sparse_combiner


def linear_model_fn(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Head,
    feature_columns: Sequence[Any],
    optimizer: Any,
    sparse_combiner: str = "sum",
) -> Any:
    """The linear canned model_fn: one weight matrix per column plus a bias, under ``head``.
    An optimizer given by name gets learning rate 0.2; in TRAIN its ``iterations`` is the
    global step.

    Raises:
      ValueError: features not a dict, a bad column, a bad optimizer.
    """
    check_features(features)
    logits, variables = linear_logits(head.logits_dimension, feature_columns, sparse_combiner, features)
    if mode == ModeKeys.TRAIN:
        optimizer = get_optimizer_instance_v2(
            optimizer or default_linear_optimizer(feature_columns), learning_rate=LEARNING_RATE
        )
        optimizer.iterations = tf.compat.v1.train.get_or_create_global_step()
    else:
        optimizer = None
    return head.create_estimator_spec(
        features=features,
        mode=mode,
        labels=labels,
        optimizer=optimizer,
        trainable_variables=variables,
        logits=logits,
    )


class _LinearBase(Estimator):
    def _init_linear(
        self,
        head: Head,
        feature_columns: Any,
        optimizer: Any,
        sparse_combiner: str,
        model_dir: str | os.PathLike[str] | None,
        config: Any,
        warm_start_from: Any,
    ) -> None:
        check_sparse_combiner(sparse_combiner)
        columns = tuple(feature_columns or [])
        self._head = head

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            del config
            return linear_model_fn(features, labels, mode, head, columns, optimizer, sparse_combiner)

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class LinearClassifier(_LinearBase):
    """A linear classifier (``tf.estimator.LinearClassifier``, TF 2.15's v2 form): logits
    are a weighted sum of the columns plus a bias; a categorical column acts as its
    indicator (multi-hot) vector. Variables and Ftrl's slots carry TF 2.15's names
    (``linear/linear_model/<column>/weights``, ``training/Ftrl/.../accumulator``), so a
    TF 2.15 model_dir continues here.

    Args:
      feature_columns: ``tf.feature_column`` columns (v2), dense or categorical.
      model_dir, n_classes, weight_column, label_vocabulary, config, warm_start_from,
      loss_reduction: as ``DNNClassifier``.
      optimizer: ``'Ftrl'`` (the default), another name (learning rate 0.2), a
        ``tf_keras.optimizers.legacy.Optimizer``, a callable returning one, or None (Ftrl
        with learning rate ``min(0.2, 1/sqrt(len(feature_columns)))``). TF's ``LinearSDCA``
        is not supported.
      sparse_combiner: how the weights of a multivalent categorical example combine:
        ``'sum'`` (default), ``'mean'`` or ``'sqrtn'``.

    Raises:
      ValueError: ``n_classes`` < 2, a bad label_vocabulary / loss_reduction (by the head),
        a bad sparse_combiner.
    """

    def __init__(
        self,
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        n_classes: int = 2,
        weight_column: Any = None,
        label_vocabulary: Sequence[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        sparse_combiner: str = "sum",
    ) -> None:
        head = _heads.binary_or_multi_class_head(n_classes, weight_column, label_vocabulary, loss_reduction)
        self._init_linear(
            head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from
        )


class LinearRegressor(_LinearBase):
    """A linear regressor (``tf.estimator.LinearRegressor``, TF 2.15's v2 form).

    Args:
      feature_columns, model_dir, weight_column, optimizer, config, warm_start_from,
      loss_reduction, sparse_combiner: as ``LinearClassifier``.
      label_dimension: int, regression targets per example.

    Raises:
      ValueError: a bad label_dimension / loss_reduction (by the head), a bad
        sparse_combiner.
    """

    def __init__(
        self,
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        warm_start_from: Any = None,
        loss_reduction: str = SUM_OVER_BATCH_SIZE,
        sparse_combiner: str = "sum",
    ) -> None:
        head = _heads.regression_head(label_dimension, weight_column, loss_reduction)
        self._init_linear(
            head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from
        )


class LinearEstimator(_LinearBase):
    """A linear model under a head of your own (``tf.estimator.LinearEstimator``, TF 2.15's
    v2 form): the model, optimizer and checkpoint names of ``LinearClassifier``, with
    ``head`` in place of the classifier's head.

    Args:
      head: a ``tf_bridge.estimator`` head (``Head``); its ``logits_dimension`` is the
        number of logits per example (each column gets ``[column width, logits_dimension]``
        weights, the bias ``[logits_dimension]``).
      feature_columns, model_dir, optimizer, config, sparse_combiner, warm_start_from: as
        ``LinearClassifier``.

    Raises:
      ValueError: a bad sparse_combiner; at train time a bad optimizer or one the head
        cannot use (a ``tf.compat.v1.train`` optimizer); what the head raises.
    """

    def __init__(
        self,
        head: Head,
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        sparse_combiner: str = "sum",
        warm_start_from: Any = None,
    ) -> None:
        self._init_linear(
            head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from
        )


# tensorflow_estimator's module defined the v2 classes as ``...V2`` (the plain names were v1);
# these are the v2 classes under both (see tf_bridge.runtime.import_compat).
LinearClassifierV2 = LinearClassifier
LinearRegressorV2 = LinearRegressor
LinearEstimatorV2 = LinearEstimator
