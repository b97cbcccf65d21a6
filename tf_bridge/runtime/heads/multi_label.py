"""``MultiLabelHead`` (``tf.estimator.MultiLabelHead``): any subset of ``n_classes``
classes per example, sigmoid cross entropy per class, tf.estimator's metrics and exports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiLabelHeadArgs
from jaxspec.rules.head_keys import (
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import _checks, base, base_template
from tf_bridge.runtime.spec import ExportOutput

TensorLike: TypeAlias = tf.types.experimental.TensorLike

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric

P = PredictionKeys
_VALID_KEYS = (P.LOGITS, P.PROBABILITIES, P.CLASSES)


class MultiLabelHead(MultiLabelHeadArgs, base_template.HeadTemplate):
    """Multi-label classification (``tf.estimator.MultiLabelHead``).

    Args:
      n_classes: the number of classes, > 1.
      weight_column: None, a feature key (str) or a ``tf.feature_column.numeric_column``
        giving per-example weights ``[D0, ..., DN]`` or ``[D0, ..., DN, 1]``.
      thresholds: probabilities in (0, 1); each adds accuracy/precision/recall at it.
      label_vocabulary: list/tuple of ``n_classes`` class names, used by string
        SparseTensor labels and the ``classes`` output.
      loss_reduction: ``'sum_over_batch_size'`` (default), ``'sum'`` or ``'auto'``.
      loss_fn: ``(labels, logits[, features]) -> [D0, ..., DN, 1]`` unweighted losses; it
        gets the int64 indicator labels.
      classes_for_class_based_metrics: class ids or (with a vocabulary) names; each adds
        ``probability_mean/<c>``, ``auc/<c>``, ``auc_precision_recall/<c>``
        (``class<id>`` without a vocabulary).
      name: suffix of the metric keys and the name scope; required inside a MultiHead.

    Labels are an int indicator tensor ``[D0, ..., DN, n_classes]`` of 0/1, or a
    SparseTensor of class ids (int) or class names (string, with label_vocabulary).

    Raises:
      ValueError: n_classes None or < 2, a threshold outside (0, 1), a bad
        label_vocabulary, an unknown loss_reduction, a bad loss_fn, or a class for
        class-based metrics out of range or (strings) without a vocabulary.
    """

    def _labels(self, logits: tf.Tensor, labels: PyTree) -> tf.Tensor:
        """int64 indicator labels ``[D0, ..., DN, n_classes]``."""
        if labels is None:
            _checks.check_labels(None, logits, self._n_classes)
        if isinstance(labels, tf.SparseTensor):
            if labels.dtype == tf.string:
                if not self._label_vocabulary:
                    raise ValueError("string SparseTensor labels need the head's label_vocabulary.")
                ids = base.class_id_lookup(self._label_vocabulary, labels.values)
                ids = _checks.check_label_range(
                    ids, self._n_classes, message="labels must be in label_vocabulary"
                )
                labels = tf.SparseTensor(labels.indices, ids, labels.dense_shape)
            elif not labels.dtype.is_integer:
                raise ValueError(
                    f"SparseTensor labels must hold integer class ids; got dtype {labels.dtype.name}."
                )
            else:
                ids = _checks.check_label_range(
                    labels.values,
                    self._n_classes,
                    message=f"SparseTensor labels must be class ids in [0, {self._n_classes})",
                )
                labels = tf.SparseTensor(labels.indices, ids, labels.dense_shape)
            labels = tf.cast(tf.sparse.to_indicator(labels, self._n_classes), tf.int64)
        else:
            labels = tf.convert_to_tensor(labels)
            labels = _checks.check_label_range(
                labels, 2, message="labels must be an indicator tensor of 0s and 1s"
            )
        return _checks.check_labels(labels, logits, self._n_classes)

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, labels: tf.Tensor, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, 1)
        else:
            xent = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
            loss = tf.reduce_mean(xent, axis=-1, keepdims=True)
        return loss, _checks.weights_for(features, self._weight_column, logits)

    def predictions(self, logits: TensorLike, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        """``logits``, ``probabilities`` (sigmoid) [.., n_classes] and ``classes`` string
        [batch, n_classes] (every class name); only ``keys`` when given."""
        if keys:
            check_prediction_keys(keys, _VALID_KEYS)
        else:
            keys = _VALID_KEYS
        logits = _checks.check_logits(logits, self._n_classes)
        out: dict[str, tf.Tensor] = {}
        with tf.name_scope("predictions"):
            if P.LOGITS in keys:
                out[P.LOGITS] = logits
            if P.PROBABILITIES in keys:
                out[P.PROBABILITIES] = tf.math.sigmoid(logits, name=P.PROBABILITIES)
            if P.CLASSES in keys:
                out[P.CLASSES] = base.all_classes(logits, self._n_classes, self._label_vocabulary)
        return out

    def _class_keys(self) -> list[tuple[int, str, str, str]]:
        k, out = MetricKeys, []
        for c in self._classes:
            if self._label_vocabulary is None:
                names = (k.PROBABILITY_MEAN_AT_CLASS % c, k.AUC_AT_CLASS % c, k.AUC_PR_AT_CLASS % c)
            else:
                label = self._label_vocabulary[c]
                names = (k.PROBABILITY_MEAN_AT_NAME % label, k.AUC_AT_NAME % label, k.AUC_PR_AT_NAME % label)
            out.append((c, *(self._summary_key(n) for n in names)))
        return out

    def _threshold_keys(self) -> list[tuple[float, str, str, str]]:
        k = MetricKeys
        return [
            (
                t,
                *(
                    self._summary_key(p % t)
                    for p in (k.ACCURACY_AT_THRESHOLD, k.PRECISION_AT_THRESHOLD, k.RECALL_AT_THRESHOLD)
                ),
            )
            for t in self._thresholds
        ]

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, KerasMetric]:
        """Fresh tf_keras metrics: ``average_loss``, ``auc``, ``auc_precision_recall``,
        ``regularization_loss`` (with regularization losses), the threshold keys and the
        class-based keys (each ``/name``-suffixed)."""
        m, k, key = base.keras_metrics(), MetricKeys, self._summary_key
        out = {
            key(k.LOSS_MEAN): m.Mean(name=k.LOSS_MEAN),
            key(k.AUC): m.AUC(name=k.AUC),
            key(k.AUC_PR): m.AUC(curve="PR", name=k.AUC_PR),
        }
        if regularization_losses is not None:
            out[key(k.LOSS_REGULARIZATION)] = m.Mean(name=k.LOSS_REGULARIZATION)
        for t, acc, prec, rec in self._threshold_keys():
            out[acc] = m.BinaryAccuracy(name=acc, threshold=t)
            out[prec] = m.Precision(name=prec, thresholds=t)
            out[rec] = m.Recall(name=rec, thresholds=t)
        for _, prob, auc, auc_pr in self._class_keys():
            out[prob] = m.Mean(name=prob)
            out[auc] = m.AUC(name=auc)
            out[auc_pr] = m.AUC(curve="PR", name=auc_pr)
        return out

    def _update_head_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        logits: tf.Tensor,
        labels: tf.Tensor,
        weights: tf.Tensor | float,
    ) -> None:
        k, key = MetricKeys, self._summary_key
        probabilities = self.predictions(logits, [P.PROBABILITIES])[P.PROBABILITIES]
        for name in (k.AUC, k.AUC_PR):
            eval_metrics[key(name)].update_state(y_true=labels, y_pred=probabilities, sample_weight=weights)
        for _, *names in self._threshold_keys():
            for name in names:
                eval_metrics[name].update_state(y_true=labels, y_pred=probabilities, sample_weight=weights)
        for c, prob, auc, auc_pr in self._class_keys():
            class_probabilities = probabilities[..., c : c + 1]
            class_labels = labels[..., c : c + 1]
            base.update_mean(eval_metrics[prob], class_probabilities, weights)
            for name in (auc, auc_pr):
                eval_metrics[name].update_state(
                    y_true=class_labels, y_pred=class_probabilities, sample_weight=weights
                )

    def _export_outputs(self, predictions: dict[str, tf.Tensor]) -> dict[str, ExportOutput]:
        """``serving_default`` and ``classification`` (probabilities and class names) and
        ``predict``."""
        return base_template.classifier_exports(predictions, self._n_classes, self._label_vocabulary)
