"""``RegressionHead``, ``PoissonRegressionHead`` and ``LogisticRegressionHead``
(tf.estimator's): squared error (or a given loss), ``predictions``, regression exports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from jaxspec.rules.head_init import LogisticRegressionHeadArgs, PoissonRegressionHeadArgs, RegressionHeadArgs
from jaxspec.rules.head_keys import (
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)
from tf_bridge.runtime.heads import _checks, base
from tf_bridge.runtime.spec import ModeKeys, PredictOutput, RegressionOutput, TPUEstimatorSpec

P = PredictionKeys


class RegressionHead(RegressionHeadArgs, base.Head):
    """Regression of ``label_dimension`` values per example with squared error
    (``tf.estimator.RegressionHead``).

    Args:
      label_dimension: values per example (labels and logits ``[D0, ..., DN, label_dimension]``).
      weight_column: None, a feature key (str) or a ``tf.feature_column.numeric_column``
        giving weights ``[D0, ..., DN]``, ``[D0, ..., DN, 1]`` or ``[D0, ..., DN, label_dimension]``.
      loss_reduction: ``'sum_over_batch_size'`` (default), ``'sum'`` or ``'auto'``.
      loss_fn: ``(labels, logits[, features]) -> [D0, ..., DN, label_dimension]``
        unweighted losses, replacing squared error.
      inverse_link_fn: ``logits -> predictions``; with it ``predictions()`` also returns
        ``logits``.
      name: suffix of the metric keys and the name scope; required inside a MultiHead.

    Raises:
      ValueError: label_dimension < 1, an unknown loss_reduction, or a bad loss_fn.
    """

    def _labels(self, logits: tf.Tensor, labels: Any) -> tf.Tensor:
        labels = _checks.check_labels(labels, logits, self._logits_dimension)
        return tf.cast(labels, tf.float32)

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, labels: tf.Tensor, features: Any
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, self._logits_dimension)
        else:
            # TF 2.15's mean_squared_error refused static shapes that differ (no broadcasting).
            logits.shape.assert_is_compatible_with(labels.shape)
            loss = tf.math.squared_difference(logits, labels)
        weights = _checks.weights_for(features, self._weight_column, logits, per_logit=True)
        return loss, weights

    def loss(
        self,
        labels: tf.types.experimental.TensorLike,
        logits: tf.types.experimental.TensorLike,
        features: Any = None,
        mode: Any = None,
        regularization_losses: Sequence[Any] | None = None,
    ) -> tf.Tensor:
        """The scalar training loss: weighted squared error (or ``loss_fn``) reduced by
        ``loss_reduction`` (SUM_OVER_BATCH_SIZE divides by batch * label_dimension), plus
        the regularization losses.

        Args:
          labels: numbers ``[D0, ..., DN, label_dimension]`` (or ``[D0, ..., DN]`` for 1).
          logits: float ``[D0, ..., DN, label_dimension]``.
          features: dict holding the weight column, if any.
          mode: unused.
          regularization_losses: list of scalar tensors, or None.

        Raises:
          ValueError: (eager) bad logits/labels/weights shapes; (graph) a bad logits/labels
            rank or last dimension, static logits/labels shapes that differ, or weights
            that do not broadcast (as TF 2.15).
          tf.errors.InvalidArgumentError: (graph) a wrong shape that only TF 2.15 checked
            when the graph ran (labels' other dimensions, weights, ``loss_fn``'s output).
        """
        del mode
        with tf.name_scope("losses"):
            logits = _checks.check_logits(logits, self._logits_dimension)
            labels = self._labels(logits, labels)
            unweighted, weights = self._unweighted_loss_and_weights(logits, labels, features)
            loss = _checks.weighted_loss(unweighted, weights, self._loss_reduction)
            return base.add_regularization(loss, regularization_losses)

    def predictions(self, logits: Any) -> dict[str, tf.Tensor]:
        """``predictions`` (``inverse_link_fn(logits)`` or the logits) ``[.., label_dimension]``,
        and ``logits`` when there is an inverse_link_fn."""
        logits = _checks.check_logits(logits, self._logits_dimension)
        with tf.name_scope("predictions"):
            if self._inverse_link_fn:
                return {P.PREDICTIONS: self._inverse_link_fn(logits), P.LOGITS: logits}
            return {P.PREDICTIONS: logits}

    def metrics(self, regularization_losses: Sequence[Any] | None = None) -> dict[str, Any]:
        """Fresh tf_keras metrics: ``average_loss``, ``prediction/mean``, ``label/mean``
        and, with regularization losses, ``regularization_loss`` (each ``/name``-suffixed)."""
        m, k, key = base.keras_metrics(), MetricKeys, self._summary_key
        out = {
            key(k.LOSS_MEAN): m.Mean(name=k.LOSS_MEAN),
            key(k.PREDICTION_MEAN): m.Mean(name=k.PREDICTION_MEAN),
            key(k.LABEL_MEAN): m.Mean(name=k.LABEL_MEAN),
        }
        if regularization_losses is not None:
            out[key(k.LOSS_REGULARIZATION)] = m.Mean(name=k.LOSS_REGULARIZATION)
        return out

    def update_metrics(
        self,
        eval_metrics: dict[str, Any],
        features: Any,
        logits: tf.types.experimental.TensorLike,
        labels: tf.types.experimental.TensorLike,
        regularization_losses: Sequence[Any] | None = None,
    ) -> dict[str, Any]:
        """Update ``metrics()``'s dict with one batch (weighted by the weight column)."""
        k, key = MetricKeys, self._summary_key
        predicted = self.predictions(logits)[P.PREDICTIONS]
        logits = _checks.check_logits(logits, self._logits_dimension)
        labels = self._labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, labels, features)
        eval_metrics[key(k.LOSS_MEAN)].update_state(values=unweighted, sample_weight=weights)
        eval_metrics[key(k.LABEL_MEAN)].update_state(values=labels, sample_weight=weights)
        base.update_mean(eval_metrics[key(k.PREDICTION_MEAN)], predicted, weights)
        total = base.regularization_total(regularization_losses)
        if total is not None:
            eval_metrics[key(k.LOSS_REGULARIZATION)].update_state(values=total)
        return eval_metrics

    def _create_tpu_estimator_spec(
        self,
        features: Any,
        mode: str,
        logits: tf.types.experimental.TensorLike,
        labels: tf.types.experimental.TensorLike | None = None,
        optimizer: Any = None,
        trainable_variables: Sequence[Any] | None = None,
        train_op_fn: Callable[[tf.Tensor], Any] | None = None,
        update_ops: Sequence[Any] | None = None,
        regularization_losses: Sequence[Any] | None = None,
    ) -> TPUEstimatorSpec:
        """The spec for ``mode``; PREDICT exports ``serving_default`` and ``regression``
        (RegressionOutput of ``predictions``) and ``predict``."""
        with tf.name_scope(self._name or "head"):
            predictions = self.predictions(logits)
            if mode == ModeKeys.PREDICT:
                regress = RegressionOutput(value=predictions[P.PREDICTIONS])
                return TPUEstimatorSpec(
                    mode=ModeKeys.PREDICT,
                    predictions=predictions,
                    export_outputs={
                        DEFAULT_SERVING_KEY: regress,
                        REGRESS_SERVING_KEY: regress,
                        PREDICT_SERVING_KEY: PredictOutput(predictions),
                    },
                )
            return base.train_or_eval_spec(
                self, features, mode, logits, labels, predictions, optimizer, trainable_variables,
                train_op_fn, update_ops, regularization_losses,
            )  # fmt: skip


class PoissonRegressionHead(PoissonRegressionHeadArgs, RegressionHead):
    """Poisson regression (``tf.estimator.PoissonRegressionHead``): the loss is
    ``tf.nn.log_poisson_loss`` with logits as the log rate, predictions are ``exp(logits)``.

    Args:
      label_dimension, weight_column, loss_reduction, name: as RegressionHead.
      compute_full_loss: add the Stirling term of the full Poisson loss (default True).
    """

    _exp = staticmethod(tf.math.exp)  # the inverse link

    def _poisson_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        return tf.nn.log_poisson_loss(
            targets=labels, log_input=logits, compute_full_loss=self._compute_full_loss
        )


class LogisticRegressionHead(LogisticRegressionHeadArgs, RegressionHead):
    """Regression of a value in [0, 1] (``tf.estimator.LogisticRegressionHead``): sigmoid
    cross entropy against the label, predictions ``sigmoid(logits)``.

    Args:
      weight_column, loss_reduction, name: as RegressionHead.

    ``loss`` raises ValueError (eager) or tf.errors.InvalidArgumentError (graph, at run
    time) for a label outside [0, 1].
    """

    _sigmoid = staticmethod(tf.math.sigmoid)  # the inverse link

    def _logistic_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        labels = _checks.check_label_range(labels, 2, message="labels must be in [0, 1]")
        return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
