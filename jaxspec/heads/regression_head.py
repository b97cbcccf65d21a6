"""``RegressionHead`` (``tf.estimator.RegressionHead``): squared error on
``label_dimension`` outputs per example."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax

from jaxspec.export import ExportOutput, PredictOutput, RegressionOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.heads.base_head import HeadTemplate
from jaxspec.metrics import Metric
from jaxspec.rules.head_init import LogisticRegressionHeadArgs, PoissonRegressionHeadArgs, RegressionHeadArgs
from jaxspec.rules.head_keys import (
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree


class RegressionHead(RegressionHeadArgs, HeadTemplate):
    """Regression with squared error, as ``tf.estimator.RegressionHead`` in TF 2.15.

    Eval metrics: ``average_loss``, ``prediction/mean``, ``label/mean`` (and
    ``regularization_loss``), suffixed ``/name`` for a named head. Predictions:
    ``predictions`` (``inverse_link_fn(logits)``, or the logits), and ``logits`` when there
    is an ``inverse_link_fn``.

    Args:
      label_dimension: outputs per example, >= 1.
      weight_column: None or the features key of the weights: ``[batch]``,
        ``[batch, 1]`` or ``[batch, label_dimension]``.
      loss_reduction: ``Reduction.SUM_OVER_BATCH_SIZE`` (default), ``SUM`` or ``AUTO``.
      loss_fn: ``loss_fn(labels, logits[, features])`` returning
        ``[batch, label_dimension]`` (replaces the squared error).
      inverse_link_fn: maps logits to predictions (e.g. ``jnp.exp``).
      name: the head's name.

    Raises:
      ValueError: label_dimension < 1, an invalid loss_reduction or loss_fn.
    """

    def _unweighted_loss_and_weights(
        self, logits: Array, labels: Array, features: PyTree
    ) -> tuple[Array, ArrayLike]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, self._logits_dimension)
        else:
            loss = jnp.square(logits - labels)
        weights = _checks.get_weights(features, self._weight_column, logits, allow_per_logit_weights=True)
        return loss, weights

    def _processed_labels(self, logits: Array, labels: PyTree) -> tuple[Array, Array | None]:
        labels = jnp.asarray(_checks.check_labels(labels, logits, self._logits_dimension), jnp.float32)
        return labels, self._labels_ok(labels)

    def _labels_ok(self, labels: Array) -> Array | None:
        """A traced range check of the labels (None: none needed); see ``labels_in_range``."""
        return None

    def predictions(self, logits: ArrayLike, keys: Sequence[str] | None = None) -> dict[str, Array]:
        """``{'predictions': ...}`` (plus ``'logits'`` with an inverse_link_fn); TF's
        RegressionHead takes no ``keys``, accepted here and ignored."""
        logits = _checks.check_logits(logits, self._logits_dimension)
        if self._inverse_link_fn:
            return {PredictionKeys.PREDICTIONS: self._inverse_link_fn(logits), PredictionKeys.LOGITS: logits}
        return {PredictionKeys.PREDICTIONS: logits}

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        regression = RegressionOutput(value=predictions[PredictionKeys.PREDICTIONS])
        return {
            DEFAULT_SERVING_KEY: regression,
            REGRESS_SERVING_KEY: regression,
            PREDICT_SERVING_KEY: PredictOutput(predictions),
        }

    def _metric_placeholders(self) -> tuple[Array, Array, Array]:
        z = jnp.zeros((1, self._logits_dimension), jnp.float32)
        return z, z, z

    def _head_metrics(self, logits: Array, labels: Array, weights: ArrayLike) -> dict[str, Metric]:
        k = MetricKeys
        predicted = self.predictions(logits)[PredictionKeys.PREDICTIONS]
        return {
            self._summary_key(k.PREDICTION_MEAN): _metrics.broadcast_mean(predicted, weights),
            self._summary_key(k.LABEL_MEAN): _metrics.broadcast_mean(labels, weights),
        }


def log_poisson_loss(targets: jax.Array, log_input: jax.Array, compute_full_loss: bool = False) -> jax.Array:
    """``exp(log_input) - log_input * targets``, plus Stirling's approximation of
    ``log(targets!)`` for targets > 1 when ``compute_full_loss`` (``tf.nn.log_poisson_loss``)."""
    loss = jnp.exp(log_input) - log_input * targets
    if not compute_full_loss:
        return loss
    small = (targets >= 0) & (targets <= 1)
    t = jnp.where(small, 1.0, targets)
    stirling = t * jnp.log(t) - t + 0.5 * jnp.log(2.0 * jnp.pi * t)
    return loss + jnp.where(small, 0.0, stirling)


class PoissonRegressionHead(PoissonRegressionHeadArgs, RegressionHead):
    """Poisson regression (``tf.estimator.PoissonRegressionHead``): logits are log-rates,
    the loss is ``log_poisson_loss``, predictions are ``exp(logits)``.

    Args:
      label_dimension, weight_column, loss_reduction, name: as RegressionHead.
      compute_full_loss: add Stirling's term (default True, as TF).
    """

    _exp = staticmethod(jnp.exp)  # the inverse link

    def _poisson_loss(self, labels: jax.Array, logits: jax.Array) -> jax.Array:
        return log_poisson_loss(labels, logits, self._compute_full_loss)


class LogisticRegressionHead(LogisticRegressionHeadArgs, RegressionHead):
    """Regression of a probability (``tf.estimator.LogisticRegressionHead``): labels in
    [0, 1], sigmoid cross entropy, predictions ``sigmoid(logits)``.

    Args:
      weight_column, loss_reduction, name: as RegressionHead (label_dimension is 1).
    """

    _sigmoid = staticmethod(jax.nn.sigmoid)  # the inverse link

    def _labels_ok(self, labels: Array) -> Array | None:
        return _checks.labels_in_range(labels, 2, message="labels must be in [0, 1].")

    @staticmethod
    def _logistic_loss(labels: jax.Array, logits: jax.Array) -> jax.Array:
        return optax.sigmoid_binary_cross_entropy(logits, labels)
