"""``RegressionHead``, ``PoissonRegressionHead`` and ``LogisticRegressionHead``
(tf.estimator's): squared error (or a given loss), ``predictions``, regression exports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_init import LogisticRegressionHeadArgs, PoissonRegressionHeadArgs, RegressionHeadArgs
from jaxspec.rules.head_keys import (
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import _checks, base, base_template
from tf_bridge.runtime.spec import ExportOutput, PredictOutput, RegressionOutput

TensorLike: TypeAlias = tf.types.experimental.TensorLike

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric

P = PredictionKeys


class RegressionHead(RegressionHeadArgs, base_template.HeadTemplate):
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

    def _labels(self, logits: tf.Tensor, labels: PyTree) -> tf.Tensor:
        labels = _checks.check_labels(labels, logits, self._logits_dimension)
        return tf.cast(labels, tf.float32)

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, labels: tf.Tensor, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, self._logits_dimension)
        else:
            # TF 2.15's mean_squared_error refused static shapes that differ (no broadcasting).
            logits.shape.assert_is_compatible_with(labels.shape)
            loss = tf.math.squared_difference(logits, labels)
        weights = _checks.weights_for(features, self._weight_column, logits, per_logit=True)
        return loss, weights

    def predictions(self, logits: TensorLike, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        """``predictions`` (``inverse_link_fn(logits)`` or the logits) ``[.., label_dimension]``,
        and ``logits`` when there is an inverse_link_fn. TF's RegressionHead takes no
        ``keys``; accepted here (the head interface's) and ignored."""
        logits = _checks.check_logits(logits, self._logits_dimension)
        with tf.name_scope("predictions"):
            if self._inverse_link_fn:
                return {P.PREDICTIONS: self._inverse_link_fn(logits), P.LOGITS: logits}
            return {P.PREDICTIONS: logits}

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, KerasMetric]:
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

    def _update_head_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        logits: tf.Tensor,
        labels: tf.Tensor,
        weights: tf.Tensor | float,
    ) -> None:
        k, key = MetricKeys, self._summary_key
        eval_metrics[key(k.LABEL_MEAN)].update_state(values=labels, sample_weight=weights)
        base.update_mean(
            eval_metrics[key(k.PREDICTION_MEAN)], self.predictions(logits)[P.PREDICTIONS], weights
        )

    def _export_outputs(self, predictions: dict[str, tf.Tensor]) -> dict[str, ExportOutput]:
        """``serving_default`` and ``regression`` (RegressionOutput of ``predictions``) and
        ``predict``."""
        regress = RegressionOutput(value=predictions[P.PREDICTIONS])
        return {
            DEFAULT_SERVING_KEY: regress,
            REGRESS_SERVING_KEY: regress,
            PREDICT_SERVING_KEY: PredictOutput(predictions),
        }


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
