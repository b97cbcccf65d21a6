"""``HeadTemplate``: what tf_bridge's concrete heads share, written once: ``loss``,
``update_metrics`` and the spec assembly (``_create_tpu_estimator_spec``), as
tf.estimator 2.15's heads build them. A head built on it supplies what differs: how its
labels are read, its per-example loss, its metric list and their updates, its
predictions and export outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_keys import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import _checks, base
from tf_bridge.runtime.spec import ExportOutput, ModeKeys, PredictOutput, TPUEstimatorSpec

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric
    from tf_keras.optimizers.legacy import Optimizer as KerasOptimizer

TensorLike: TypeAlias = tf.types.experimental.TensorLike


class HeadTemplate(base.Head):
    """The template of the single heads (Binary, MultiClass, MultiLabel, Regression). A
    head built on it defines:

    - ``_labels(logits, labels) -> tensor``: the labels as its loss takes them (checked,
      vocabulary strings looked up, range asserted);
    - ``_unweighted_loss_and_weights(logits, labels, features)``: the per-example losses
      ``[D0, ..., DN, 1 or label_dimension]`` (its loss, or ``loss_fn``'s) and the weights
      (the weight column, or 1.0);
    - ``metrics(regularization_losses)``: its fresh tf_keras metrics, ``average_loss``
      and ``regularization_loss`` (with regularization losses) among them;
    - ``_update_head_metrics(eval_metrics, logits, labels, weights)``: the updates of its
      metrics other than those two;
    - ``predictions(logits, keys)`` and ``_export_outputs(predictions)``.
    """

    def _labels(self, logits: tf.Tensor, labels: TensorLike) -> tf.Tensor:
        raise NotImplementedError(f"{type(self).__name__} defines no _labels.")

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, labels: tf.Tensor, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        raise NotImplementedError(f"{type(self).__name__} defines no _unweighted_loss_and_weights.")

    def _update_head_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        logits: tf.Tensor,
        labels: tf.Tensor,
        weights: tf.Tensor | float,
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines no _update_head_metrics.")

    def _export_outputs(self, predictions: dict[str, tf.Tensor]) -> dict[str, ExportOutput]:
        raise NotImplementedError(f"{type(self).__name__} defines no export outputs.")

    def _static_logits_dimension(self) -> int:
        """``logits_dimension`` as an int (MultiClassHead's may be a tensor)."""
        return self.logits_dimension

    def _batch(
        self, logits: TensorLike, labels: TensorLike, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor | float]:
        """Checked logits and labels, the per-example losses and the weights."""
        checked = _checks.check_logits(logits, self._static_logits_dimension())
        ready = self._labels(checked, labels)
        unweighted, weights = self._unweighted_loss_and_weights(checked, ready, features)
        return checked, ready, unweighted, weights

    def loss(
        self,
        labels: TensorLike,
        logits: TensorLike,
        features: PyTree = None,
        mode: str | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> tf.Tensor:
        """The scalar training loss (``tf.estimator.Head.loss``): the head's per-example
        loss (or ``loss_fn``'s), weighted by the weight column and reduced by
        ``loss_reduction``, plus the regularization losses; in the name scope ``losses``.

        Args:
          labels: as the head takes them (see its class docstring); ``[D0, ..., DN]`` is
            read as ``[D0, ..., DN, 1]``.
          logits: float ``[D0, ..., DN, logits_dimension]``.
          features: dict holding the weight column, if any.
          mode: unused (as TF).
          regularization_losses: list of scalar tensors, or None.

        Raises:
          ValueError: a label dtype the head does not take; (eager) bad shapes or label
            values; (graph) a bad logits/labels rank or last dimension, shapes TensorFlow's
            loss op refuses (as TF 2.15).
          tf.errors.InvalidArgumentError: (graph) bad label values, or a wrong shape that
            only TF 2.15 checked when the graph ran (labels' other dimensions, weights,
            ``loss_fn``'s output).
        """
        del mode
        with tf.name_scope("losses"):
            _, _, unweighted, weights = self._batch(logits, labels, features)
            loss = _checks.weighted_loss(unweighted, weights, self.loss_reduction)
            return base.add_regularization(loss, regularization_losses)

    def update_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        features: PyTree,
        logits: TensorLike,
        labels: TensorLike,
        mode: str | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> dict[str, KerasMetric]:
        """``eval_metrics`` (``metrics()``'s dict) updated in place with one batch, weighted
        by the weight column, and returned (``tf.estimator.Head.update_metrics``).

        Raises:
          ValueError / tf.errors.InvalidArgumentError: as ``loss``. KeyError: a metric
            of ``metrics()`` missing from ``eval_metrics``.
        """
        del mode
        key = self._summary_key
        logits, labels, unweighted, weights = self._batch(logits, labels, features)
        eval_metrics[key(MetricKeys.LOSS_MEAN)].update_state(values=unweighted, sample_weight=weights)
        self._update_head_metrics(eval_metrics, logits, labels, weights)
        total = base.regularization_total(regularization_losses)
        if total is not None:
            eval_metrics[key(MetricKeys.LOSS_REGULARIZATION)].update_state(values=total)
        return eval_metrics

    def _create_tpu_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: TensorLike,
        labels: TensorLike | None = None,
        optimizer: KerasOptimizer | None = None,
        trainable_variables: Sequence[tf.Variable] | None = None,
        train_op_fn: Callable[[tf.Tensor], tf.Operation] | None = None,
        update_ops: Sequence[tf.Operation] | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> TPUEstimatorSpec:
        """The spec for ``mode``, in the name scope of the head's name (or ``head``):
        PREDICT: the predictions and ``_export_outputs``; EVAL: the loss and
        ``eval_metrics = (update_metrics, tensors)``; TRAIN: the loss, the train op and the
        loss summaries (see ``base.train_or_eval_spec``)."""
        with tf.name_scope(self.name or "head"):
            predictions = self.predictions(logits)
            if mode == ModeKeys.PREDICT:
                return TPUEstimatorSpec(
                    mode=ModeKeys.PREDICT,
                    predictions=predictions,
                    export_outputs=self._export_outputs(predictions),
                )
            return base.train_or_eval_spec(
                self, features, mode, logits, labels, predictions, optimizer, trainable_variables,
                train_op_fn, update_ops, regularization_losses,
            )  # fmt: skip


def classifier_exports(
    predictions: dict[str, tf.Tensor], n_classes: int, label_vocabulary: Sequence[str] | None
) -> dict[str, ExportOutput]:
    """A classification head's ``serving_default`` and ``classification`` (the
    probabilities and the class names) and ``predict`` (every prediction) outputs."""
    classify = base.classification_output(
        predictions[PredictionKeys.PROBABILITIES], n_classes, label_vocabulary
    )
    return {
        DEFAULT_SERVING_KEY: classify,
        CLASSIFY_SERVING_KEY: classify,
        PREDICT_SERVING_KEY: PredictOutput(predictions),
    }
