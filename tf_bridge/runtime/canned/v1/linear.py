"""``tf.compat.v1.estimator.LinearClassifier``, ``LinearRegressor`` and ``LinearEstimator`` (TF
2.15's v1 classes; they differ only by their head).

TF1 optimizers (``'Ftrl'`` by name at 0.2 by default; ``optimizer=None`` gives Ftrl at
``min(0.2, 1/sqrt(number of columns))``, as TF 2.15; slots
``<variable>/Ftrl`` and ``<variable>/Ftrl_1``); the model in the variable scope ``linear``
partitioned by ``partitioner`` (default ``min_max_variable_partitioner(max_partitions=
num_ps_replicas, min_slice_size=64 << 20)``). As in TF 2.15 the optimizer runs inside the
``linear`` scope, which gives the slot keys TF 2.15 wrote: ``<variable>/part_0/Ftrl``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.canned._layers import fraction_of_zero
from tf_bridge.runtime.canned.dnn import check_features
from tf_bridge.runtime.canned.v1 import heads
from tf_bridge.runtime.canned.v1.dnn import num_ps_replicas
from tf_bridge.runtime.canned.v1.networks import (
    INPUT_LAYER_MIN_SLICE_SIZE,
    default_partitioner,
    linear_logits_v1,
)
from tf_bridge.runtime.canned.v1.optimizers import get_optimizer_instance
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.v1_forms import V1Methods, v1_loss_reduction

#: The cap of the default Ftrl's learning rate, min(cap, 1 / sqrt(number of columns)).
LEARNING_RATE = 0.2
_V1_SUM = tf.compat.v1.losses.Reduction.SUM


def default_optimizer(feature_columns: Sequence[Any]) -> Any:
    """TF 2.15's v1 linear default: ``FtrlOptimizer(min(0.2, 1/sqrt(len(feature_columns))))``."""
    return tf.compat.v1.train.FtrlOptimizer(
        learning_rate=min(LEARNING_RATE, 1.0 / math.sqrt(len(feature_columns)))
    )


def check_sparse_combiner(sparse_combiner: str) -> None:
    """Raises ValueError unless ``sparse_combiner`` is ``'sum'``, ``'mean'`` or ``'sqrtn'``."""
    if sparse_combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"sparse_combiner must be 'sum', 'mean' or 'sqrtn', got {sparse_combiner!r}.")


def linear_model_fn_v1(
    features: PyTree,
    labels: PyTree,
    mode: str,
    head: Any,
    feature_columns: Sequence[Any],
    optimizer: Any = None,
    partitioner: Any = None,
    config: Any = None,
    sparse_combiner: str = "sum",
) -> Any:
    """TF 2.15's v1 linear model_fn: the model and the head's spec in the partitioned
    variable scope ``linear``.

    Raises:
      ValueError: features not a dict, a bad column or optimizer.
    """
    check_features(features)
    partitioner = partitioner or default_partitioner(num_ps_replicas(config), INPUT_LAYER_MIN_SLICE_SIZE)
    with tf.compat.v1.variable_scope("linear", values=tuple(features.values()), partitioner=partitioner):
        logits = linear_logits_v1(head.logits_dimension, feature_columns, sparse_combiner, features)
        optimizer = get_optimizer_instance(
            optimizer or default_optimizer(feature_columns), learning_rate=LEARNING_RATE
        )
        return head.create_estimator_spec(
            features=features, mode=mode, labels=labels, optimizer=optimizer, logits=logits
        )


class _LinearV1(V1Methods, Estimator):
    def _init_linear(
        self, head: Any, model_dir: Any, config: Any, warm_start_from: Any, **kwargs: Any
    ) -> None:
        check_sparse_combiner(kwargs["sparse_combiner"])
        self._head = head
        kwargs["feature_columns"] = tuple(kwargs["feature_columns"] or [])

        def model_fn(features: PyTree, labels: PyTree, mode: str, config: Any) -> Any:
            return linear_model_fn_v1(features, labels, mode, head, config=config, **kwargs)

        super().__init__(
            model_fn=model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from
        )


class LinearClassifier(_LinearV1):
    """A linear classifier as ``tf.compat.v1.estimator.LinearClassifier`` (TF 2.15's v1
    class): TF1 optimizers and slot names, partitioned variables, v1 summaries and metrics.

    Args:
      feature_columns: ``tf.feature_column`` columns (dense or categorical).
      model_dir: checkpoints and summaries.
      n_classes: int >= 2.
      weight_column: None, a feature key or a ``numeric_column`` of example weights.
      label_vocabulary: None or the label strings.
      optimizer: a name (at learning rate 0.2: the default ``'Ftrl'`` too), a
        ``tf.compat.v1.train.Optimizer`` or a callable returning one; None gives Ftrl at
        ``min(0.2, 1/sqrt(len(feature_columns)))`` (TF 2.15's rules).
      config: a ``tf_bridge.RunConfig``.
      partitioner: partitioner of the model's variables (default
        ``min_max_variable_partitioner(max_partitions=num_ps_replicas, min_slice_size=64 << 20)``).
      warm_start_from: a checkpoint path or ``WarmStartSettings``.
      loss_reduction: a ``tf.compat.v1.losses.Reduction`` (default SUM).
      sparse_combiner: ``'sum'``, ``'mean'`` or ``'sqrtn'``: how a categorical column's
        weights combine per example.

    Raises:
      ValueError: ``n_classes`` < 2, a bad ``loss_reduction``, ``label_vocabulary`` or
        ``sparse_combiner``; at train time a bad column or optimizer.
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
        partitioner: Any = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        sparse_combiner: str = "sum",
    ) -> None:
        head = heads.binary_or_multi_class_head(
            n_classes, weight_column, label_vocabulary, v1_loss_reduction(loss_reduction)
        )
        self._init_linear(
            head, model_dir, config, warm_start_from, feature_columns=feature_columns,
            optimizer=optimizer, partitioner=partitioner,
            sparse_combiner=sparse_combiner,
        )  # fmt: skip


class LinearRegressor(_LinearV1):
    """A linear regressor as ``tf.compat.v1.estimator.LinearRegressor`` (TF 2.15's v1
    class; see ``LinearClassifier``).

    Args:
      label_dimension: int, regression targets per example.
      the rest: as ``LinearClassifier``.

    Raises:
      ValueError: as ``LinearClassifier``.
    """

    def __init__(
        self,
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        label_dimension: int = 1,
        weight_column: Any = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        partitioner: Any = None,
        warm_start_from: Any = None,
        loss_reduction: str = _V1_SUM,
        sparse_combiner: str = "sum",
    ) -> None:
        head = heads.regression_head(label_dimension, weight_column, v1_loss_reduction(loss_reduction))
        self._init_linear(
            head, model_dir, config, warm_start_from, feature_columns=feature_columns,
            optimizer=optimizer, partitioner=partitioner,
            sparse_combiner=sparse_combiner,
        )  # fmt: skip


class LinearEstimator(_LinearV1):
    """A linear model under a head of your own, as ``tf.compat.v1.estimator.LinearEstimator``
    (TF 2.15's v1 class): ``LinearClassifier``'s model, TF1 optimizer, partitioner and
    checkpoint names, with ``head`` in place of the classifier's head.

    Args:
      head: a v1 head (``tf_bridge.runtime.canned.v1.heads``; TF's private
        ``canned.head`` factories). A v2 head evaluates and predicts, and raises ValueError
        at train time, as in TF 2.15.
      feature_columns, model_dir, optimizer, config, partitioner, sparse_combiner,
      warm_start_from: as ``LinearClassifier``.

    Raises:
      ValueError: a bad ``sparse_combiner``; at train time a bad column or optimizer, or a
        v2 head; what the head raises.
    """

    def __init__(
        self,
        head: Any,
        feature_columns: Sequence[Any],
        model_dir: str | os.PathLike[str] | None = None,
        optimizer: Any = "Ftrl",
        config: RunConfig | None = None,
        partitioner: Any = None,
        sparse_combiner: str = "sum",
        warm_start_from: Any = None,
    ) -> None:
        self._init_linear(
            head, model_dir, config, warm_start_from, feature_columns=feature_columns,
            optimizer=optimizer, partitioner=partitioner,
            sparse_combiner=sparse_combiner,
        )  # fmt: skip


# tensorflow_estimator's private name of the share of zeros among the linear model's
# weights (its tests and summary hooks called it).
_compute_fraction_of_zero = fraction_of_zero
