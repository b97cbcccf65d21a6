"""``BinaryClassHead`` (``tf.estimator.BinaryClassHead``): sigmoid cross entropy on one
logit per example."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec import metrics as jmetrics
from jaxspec.export import ExportOutput, RegressionOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.heads._export_outputs import classifier_exports
from jaxspec.heads.base_head import HeadTemplate
from jaxspec.metrics import Metric
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import BinaryClassHeadArgs
from jaxspec.rules.head_keys import (
    REGRESS_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

_PRED_KEYS = (
    PredictionKeys.LOGITS,
    PredictionKeys.LOGISTIC,
    PredictionKeys.PROBABILITIES,
    PredictionKeys.CLASS_IDS,
    PredictionKeys.CLASSES,
    PredictionKeys.ALL_CLASS_IDS,
    PredictionKeys.ALL_CLASSES,
)


def class_names(n_classes: int, label_vocabulary: Sequence[str] | None) -> np.ndarray:
    """The class strings TF gives: the vocabulary, or each class id as a decimal."""
    names = label_vocabulary if label_vocabulary else [str(i) for i in range(n_classes)]
    return np.asarray(list(names), dtype=str)


def all_class_ids(logits: jax.Array, n_classes: int) -> jax.Array:
    """``[0, ..., n_classes - 1]`` for every example, int32 ``[batch, n_classes]``: one row
    per entry of axis 0 even for logits of rank > 2, as TF tiles it."""
    return jnp.broadcast_to(jnp.arange(n_classes, dtype=jnp.int32), (logits.shape[0], n_classes))


class BinaryClassHead(BinaryClassHeadArgs, HeadTemplate):
    """Binary classification: one logit per example, sigmoid cross entropy, as
    ``tf.estimator.BinaryClassHead`` in TF 2.15.

    Eval metrics: ``average_loss``, ``accuracy``, ``precision``, ``recall``,
    ``prediction/mean``, ``label/mean``, ``accuracy_baseline``, ``auc``,
    ``auc_precision_recall`` (``regularization_loss`` with regularization losses) and, per
    threshold ``t``, ``accuracy/positive_threshold_t``, ``precision/...``, ``recall/...``;
    each suffixed ``/name`` for a named head. Predictions: ``logits``, ``logistic``,
    ``probabilities``, ``class_ids``, ``classes``, ``all_class_ids``, ``all_classes``.
    JAX arrays hold no strings: ``classes`` and ``all_classes`` hold the class ids (int32,
    as ``class_ids``; TF's int64), whose strings are ``class_names()`` (the vocabulary or the
    id in decimal), which the ClassificationOutput carries for export.

    Args:
      weight_column: None or the features key of the example weights (``[batch]`` or
        ``[batch, 1]``, numeric). TF's NumericColumn form is TF-only.
      thresholds: probabilities in (0, 1) for the threshold metrics.
      label_vocabulary: list/tuple of the two class strings. Labels are then numpy
        strings (looked up on the host) or, inside a compiled step, integer ids.
      loss_reduction: ``Reduction.SUM_OVER_BATCH_SIZE`` (default), ``SUM`` or ``AUTO``.
      loss_fn: ``loss_fn(labels, logits[, features])`` returning ``[batch, 1]`` unweighted
        losses (replaces sigmoid cross entropy).
      name: the head's name (metric key suffix; required inside a MultiHead).

    Raises:
      ValueError: label_vocabulary not a list/tuple, a threshold outside (0, 1), an
        invalid loss_reduction, loss_fn without labels/logits or with other arguments.
    """

    def class_names(self) -> np.ndarray:
        """The class strings (the vocabulary, or ``'0'``, ``'1'``): ``classes[i]`` is
        TF's string for class id ``i``."""
        return class_names(2, self._label_vocabulary)

    # -- loss --------------------------------------------------------------------------
    def _processed_labels(self, logits: Array, labels: PyTree) -> tuple[Array, Array | None]:
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is not None:
            labels = _checks.label_ids_from_vocabulary(labels, self._label_vocabulary)
        labels = jnp.asarray(labels, jnp.float32)
        return labels, _checks.labels_in_range(labels, 2)

    def _unweighted_loss_and_weights(
        self, logits: Array, labels: Array, features: PyTree
    ) -> tuple[Array, ArrayLike]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, 1)
        else:
            loss = optax.sigmoid_binary_cross_entropy(logits, labels)
        return loss, _checks.get_weights(features, self._weight_column, logits)

    # -- predictions -------------------------------------------------------------------
    def predictions(self, logits: ArrayLike, keys: Sequence[str] | None = None) -> dict[str, Array]:
        """The predictions named by ``keys`` (all by default); see the class docstring."""
        if keys:
            check_prediction_keys(keys, _PRED_KEYS)
        keys = keys or _PRED_KEYS
        logits = _checks.check_logits(logits, 1)
        two_class = jnp.concatenate([jnp.zeros_like(logits), logits], axis=-1)
        class_ids = jnp.argmax(two_class, axis=-1)[..., None].astype(jnp.int32)
        values = {
            PredictionKeys.LOGITS: lambda: logits,
            PredictionKeys.LOGISTIC: lambda: jax.nn.sigmoid(logits),
            PredictionKeys.PROBABILITIES: lambda: jax.nn.softmax(two_class, axis=-1),
            PredictionKeys.CLASS_IDS: lambda: class_ids,
            PredictionKeys.CLASSES: lambda: class_ids,
            PredictionKeys.ALL_CLASS_IDS: lambda: all_class_ids(logits, 2),
            PredictionKeys.ALL_CLASSES: lambda: all_class_ids(logits, 2),
        }
        return {k: values[k]() for k in _PRED_KEYS if k in keys}

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        exports = classifier_exports(
            predictions, self.class_names(), [PredictionKeys.CLASSES, PredictionKeys.ALL_CLASSES]
        )
        exports[REGRESS_SERVING_KEY] = RegressionOutput(value=predictions[PredictionKeys.LOGISTIC])
        return exports

    def _threshold_keys(self) -> list[tuple[float, str, str, str]]:
        k = MetricKeys
        return [
            (
                t,
                self._summary_key(k.ACCURACY_AT_THRESHOLD % t),
                self._summary_key(k.PRECISION_AT_THRESHOLD % t),
                self._summary_key(k.RECALL_AT_THRESHOLD % t),
            )
            for t in self._thresholds
        ]

    def _metric_placeholders(self) -> tuple[Array, Array, Array]:
        z = jnp.zeros((1, 1), jnp.float32)
        return z, z, z

    def _head_metrics(self, logits: Array, labels: Array, weights: ArrayLike) -> dict[str, Metric]:
        k = MetricKeys
        preds = self.predictions(logits, [PredictionKeys.LOGISTIC, PredictionKeys.CLASS_IDS])
        logistic, class_ids = preds[PredictionKeys.LOGISTIC], preds[PredictionKeys.CLASS_IDS]
        w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), labels.shape)
        label_mean = _metrics.broadcast_mean(labels, w)
        precision, recall = _metrics.precision_recall_at(labels, class_ids, w, 0.5)
        out: dict[str, Metric] = {
            self._summary_key(k.ACCURACY): jmetrics.accuracy(labels, class_ids.astype(jnp.float32), w),
            self._summary_key(k.PRECISION): precision,
            self._summary_key(k.RECALL): recall,
            self._summary_key(k.PREDICTION_MEAN): _metrics.broadcast_mean(logistic, w),
            self._summary_key(k.LABEL_MEAN): label_mean,
            self._summary_key(k.ACCURACY_BASELINE): _metrics.accuracy_baseline(label_mean),
            self._summary_key(k.AUC): _metrics.keras_auc(labels, logistic, w),
            self._summary_key(k.AUC_PR): _metrics.keras_auc(labels, logistic, w, curve="PR"),
        }
        for t, acc_key, prec_key, rec_key in self._threshold_keys():
            out[acc_key] = _metrics.binary_accuracy(labels, logistic, w, t)
            out[prec_key], out[rec_key] = _metrics.precision_recall_at(labels, logistic, w, t)
        return out
