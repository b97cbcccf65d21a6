"""``BinaryClassHead`` (``tf.estimator.BinaryClassHead``): one logit per example, sigmoid
cross entropy, tf.estimator's metrics, predictions and export outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

import tensorflow as tf

from jaxspec.rules import head_keys
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import BinaryClassHeadArgs
from jaxspec.rules.head_keys import MetricKeys, PredictionKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import _checks, base, base_template
from tf_bridge.runtime.spec import ExportOutput, RegressionOutput

TensorLike: TypeAlias = tf.types.experimental.TensorLike

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric

P = PredictionKeys
_VALID_KEYS = (P.LOGITS, P.LOGISTIC, P.PROBABILITIES, P.CLASS_IDS, P.CLASSES, P.ALL_CLASS_IDS, P.ALL_CLASSES)


class BinaryClassHead(BinaryClassHeadArgs, base_template.HeadTemplate):
    """Binary classification with sigmoid cross entropy (``tf.estimator.BinaryClassHead``).

    Args:
      weight_column: None, a feature key (str) or a ``tf.feature_column.numeric_column``
        giving per-example weights ``[D0, ..., DN]`` or ``[D0, ..., DN, 1]``.
      thresholds: probabilities in (0, 1); each adds accuracy/precision/recall metrics at it
        (``accuracy/positive_threshold_<t>``, ...).
      label_vocabulary: list/tuple of the two class names; labels are then those strings.
        Without it labels are 0/1 (int or float).
      loss_reduction: ``'sum_over_batch_size'`` (default), ``'sum'`` or ``'auto'``
        (``tf_keras.losses.Reduction``; TF 2.15 took ``tf.losses.Reduction``, the same strings).
      loss_fn: ``(labels, logits[, features]) -> [D0, ..., DN, 1]`` unweighted losses,
        replacing sigmoid cross entropy.
      name: suffix of the metric keys and the name scope; required inside a MultiHead.

    Raises:
      ValueError: a label_vocabulary that is not a list/tuple, a threshold outside (0, 1),
        an unknown loss_reduction, or a loss_fn without ``labels``/``logits`` or with other
        arguments.
    """

    def _labels(self, logits: tf.Tensor, labels: PyTree) -> tf.Tensor:
        """float32 0/1 labels ``[D0, ..., DN, 1]``."""
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is not None:
            labels = base.string_labels(labels, self._label_vocabulary)
        labels = tf.cast(labels, tf.float32)
        return _checks.check_label_range(labels, 2, message="labels must be 0 or 1 (or in label_vocabulary)")

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, labels: tf.Tensor, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, 1)
        else:
            loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return loss, _checks.weights_for(features, self._weight_column, logits)

    def predictions(self, logits: TensorLike, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        """``logits`` [.., 1], ``logistic`` [.., 1], ``probabilities`` [.., 2], ``class_ids``
        int64 [.., 1], ``classes`` string [.., 1], ``all_class_ids`` int32 [batch, 2],
        ``all_classes`` string [batch, 2]; only ``keys`` when given (ValueError for another key)."""
        if keys:
            check_prediction_keys(keys, _VALID_KEYS)
        else:
            keys = _VALID_KEYS
        logits = _checks.check_logits(logits, 1)
        out: dict[str, tf.Tensor] = {}
        with tf.name_scope("predictions"):
            if P.LOGITS in keys:
                out[P.LOGITS] = logits
            if P.LOGISTIC in keys:
                out[P.LOGISTIC] = tf.math.sigmoid(logits, name=P.LOGISTIC)
            two = tf.concat([tf.zeros_like(logits), logits], axis=-1, name="two_class_logits")
            if P.PROBABILITIES in keys:
                out[P.PROBABILITIES] = tf.nn.softmax(two, name=P.PROBABILITIES)
            if P.CLASS_IDS in keys or P.CLASSES in keys:
                class_ids = tf.expand_dims(tf.math.argmax(two, axis=-1, name=P.CLASS_IDS), -1)
                if P.CLASS_IDS in keys:
                    out[P.CLASS_IDS] = class_ids
                if P.CLASSES in keys:
                    if self._label_vocabulary is not None:
                        out[P.CLASSES] = base.class_name_lookup(self._label_vocabulary, class_ids)
                    else:
                        out[P.CLASSES] = tf.strings.as_string(class_ids, name="str_classes")
            if P.ALL_CLASS_IDS in keys:
                out[P.ALL_CLASS_IDS] = base.all_class_ids(logits, 2)
            if P.ALL_CLASSES in keys:
                out[P.ALL_CLASSES] = base.all_classes(logits, 2, self._label_vocabulary)
        return out

    def _threshold_keys(self, pattern: str) -> list[str]:
        return [self._summary_key(pattern % t) for t in self._thresholds]

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, KerasMetric]:
        """Fresh tf_keras metrics under tf.estimator's keys (``average_loss``, ``accuracy``,
        ``precision``, ``recall``, ``prediction/mean``, ``label/mean``,
        ``accuracy_baseline``, ``auc``, ``auc_precision_recall``, ``regularization_loss``
        with regularization losses, and the threshold keys), each ``/name``-suffixed."""
        m, k = base.keras_metrics(), MetricKeys
        key = self._summary_key
        out = {
            key(k.LOSS_MEAN): m.Mean(name=k.LOSS_MEAN),
            key(k.ACCURACY): m.Accuracy(name=k.ACCURACY),
            key(k.PRECISION): m.Precision(name=k.PRECISION),
            key(k.RECALL): m.Recall(name=k.RECALL),
            key(k.PREDICTION_MEAN): m.Mean(name=k.PREDICTION_MEAN),
            key(k.LABEL_MEAN): m.Mean(name=k.LABEL_MEAN),
            key(k.ACCURACY_BASELINE): m.Mean(name=k.ACCURACY_BASELINE),
            key(k.AUC): m.AUC(name=k.AUC),
            key(k.AUC_PR): m.AUC(curve="PR", name=k.AUC_PR),
        }
        if regularization_losses is not None:
            out[key(k.LOSS_REGULARIZATION)] = m.Mean(name=k.LOSS_REGULARIZATION)
        for t, acc, prec, rec in zip(
            self._thresholds,
            self._threshold_keys(k.ACCURACY_AT_THRESHOLD),
            self._threshold_keys(k.PRECISION_AT_THRESHOLD),
            self._threshold_keys(k.RECALL_AT_THRESHOLD),
            strict=True,
        ):
            out[acc] = m.BinaryAccuracy(name=acc, threshold=t)
            out[prec] = m.Precision(name=prec, thresholds=t)
            out[rec] = m.Recall(name=rec, thresholds=t)
        return out

    def _update_head_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        logits: tf.Tensor,
        labels: tf.Tensor,
        weights: tf.Tensor | float,
    ) -> None:
        k, key = MetricKeys, self._summary_key
        predictions = self.predictions(logits, [P.CLASS_IDS, P.LOGISTIC])
        class_ids, logistic = predictions[P.CLASS_IDS], predictions[P.LOGISTIC]
        for name in (k.ACCURACY, k.PRECISION, k.RECALL):
            eval_metrics[key(name)].update_state(y_true=labels, y_pred=class_ids, sample_weight=weights)
        base.update_mean(eval_metrics[key(k.PREDICTION_MEAN)], logistic, weights)
        label_mean = eval_metrics[key(k.LABEL_MEAN)]
        base.update_mean(label_mean, labels, weights)
        baseline = eval_metrics[key(k.ACCURACY_BASELINE)]
        # accuracy_baseline: the weighted share of the more frequent class, read from label/mean.
        baseline.add_update(tf.no_op())
        baseline.total = tf.math.maximum(label_mean.total, label_mean.count - label_mean.total)
        baseline.count = label_mean.count
        for name in (k.AUC, k.AUC_PR):
            eval_metrics[key(name)].update_state(
                y_true=labels, y_pred=logistic, sample_weight=base.broadcast_weights(weights, logistic)
            )
        for pattern in (k.ACCURACY_AT_THRESHOLD, k.PRECISION_AT_THRESHOLD, k.RECALL_AT_THRESHOLD):
            for name in self._threshold_keys(pattern):
                eval_metrics[name].update_state(y_true=labels, y_pred=logistic, sample_weight=weights)

    def _export_outputs(self, predictions: dict[str, tf.Tensor]) -> dict[str, ExportOutput]:
        """``serving_default`` and ``classification`` (the probabilities and the class
        names), ``regression`` (the logistic) and ``predict`` (every prediction)."""
        exports = base_template.classifier_exports(predictions, 2, self._label_vocabulary)
        exports[head_keys.REGRESS_SERVING_KEY] = RegressionOutput(value=predictions[P.LOGISTIC])
        return exports
