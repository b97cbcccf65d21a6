"""``MultiLabelHead`` (``tf.estimator.MultiLabelHead``): independent sigmoid cross entropy
per class, labels as a multi-hot indicator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec.export import ExportOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.heads._export_outputs import classifier_exports
from jaxspec.heads.base_head import HeadTemplate
from jaxspec.heads.binary_class_head import all_class_ids, class_names
from jaxspec.metrics import Metric
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiLabelHeadArgs
from jaxspec.rules.head_keys import (
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

if TYPE_CHECKING:
    from jax.experimental.sparse import BCOO

_PRED_KEYS = (PredictionKeys.LOGITS, PredictionKeys.PROBABILITIES, PredictionKeys.CLASSES)


class MultiLabelHead(MultiLabelHeadArgs, HeadTemplate):
    """Multi-label classification, as ``tf.estimator.MultiLabelHead`` in TF 2.15.

    The loss of an example is the mean over classes of the sigmoid cross entropy. Eval
    metrics: ``average_loss``, ``auc``, ``auc_precision_recall`` (and
    ``regularization_loss``), per threshold ``accuracy/positive_threshold_t``,
    ``precision/...``, ``recall/...``, per class in ``classes_for_class_based_metrics``
    ``probability_mean/classK``, ``auc/classK``, ``auc_precision_recall/classK`` (the
    vocabulary name instead of ``classK`` with a vocabulary); suffixed ``/name`` for a
    named head. Predictions: ``logits``, ``probabilities`` (sigmoid), ``classes`` (every
    class for every example; int32 ids whose strings are ``class_names()``, since JAX
    arrays hold no strings).

    Args:
      n_classes: number of classes, > 1.
      weight_column: None or the features key of the weights (``[batch]``/``[batch, 1]``).
      thresholds: probabilities in (0, 1) for the threshold metrics.
      label_vocabulary: list/tuple of n_classes strings (names the classes). Labels are
        the ``[batch, n_classes]`` indicator, or a ``jax.experimental.sparse.BCOO`` of shape
        ``[batch, k]`` holding class ids (TF's SparseTensor form; string ids have no JAX
        form; on the mesh, where inputs are split on axis 0, pass the indicator).
      loss_reduction: ``Reduction.SUM_OVER_BATCH_SIZE`` (default), ``SUM`` or ``AUTO``.
      loss_fn: ``loss_fn(labels, logits[, features])`` returning ``[batch, 1]``.
      classes_for_class_based_metrics: class ids, or vocabulary strings.
      name: the head's name.

    Raises:
      ValueError: n_classes < 2, a threshold outside (0, 1), a bad vocabulary, an invalid
        loss_reduction or loss_fn, class ids out of range or strings without vocabulary.
    """

    def class_names(self) -> np.ndarray:
        """The class strings: ``class_names()[i]`` is TF's string for class ``i``."""
        return class_names(self._n_classes, self._label_vocabulary)

    def _sparse_indicator(self, labels: BCOO) -> tuple[Array, Array | None]:
        """``jax.experimental.sparse.BCOO`` labels (class ids per example, TF's SparseTensor
        form) as the ``[batch, n_classes]`` indicator, as ``tf.sparse.to_indicator``."""
        ids = labels.data
        if not np.issubdtype(np.dtype(ids.dtype), np.integer):
            raise ValueError(f"sparse labels must hold integer class ids, got dtype {ids.dtype}.")
        ok = _checks.labels_in_range(
            ids, self._n_classes, message=f"sparse labels must be class ids in [0, {self._n_classes})."
        )
        rows = labels.indices[:, 0]
        indicator = jnp.zeros((labels.shape[0], self._n_classes), jnp.int32)
        return indicator.at[rows, jnp.clip(ids, 0, self._n_classes - 1)].set(1), ok

    def _processed_labels(self, logits: Array, labels: PyTree) -> tuple[Array, Array | None]:
        if labels is None:
            _checks.check_labels(None, logits, self._n_classes)
        if type(labels).__name__ == "BCOO":
            indicator, ok = self._sparse_indicator(labels)
            return jnp.asarray(_checks.check_labels(indicator, logits, self._n_classes)), ok
        ok = _checks.labels_in_range(
            labels, 2, message="labels must be an integer indicator array with values in [0, 1]."
        )
        labels = _checks.check_labels(labels, logits, self._n_classes)
        return jnp.asarray(labels), ok

    def _unweighted_loss_and_weights(
        self, logits: Array, labels: Array, features: PyTree
    ) -> tuple[Array, ArrayLike]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, 1)
        else:
            per_class = optax.sigmoid_binary_cross_entropy(logits, labels.astype(jnp.float32))
            loss = jnp.mean(per_class, axis=-1, keepdims=True)
        return loss, _checks.get_weights(features, self._weight_column, logits)

    def predictions(self, logits: ArrayLike, keys: Sequence[str] | None = None) -> dict[str, Array]:
        """The predictions named by ``keys`` (all by default)."""
        if keys:
            check_prediction_keys(keys, _PRED_KEYS)
        keys = keys or _PRED_KEYS
        logits = _checks.check_logits(logits, self._n_classes)
        values = {
            PredictionKeys.LOGITS: lambda: logits,
            PredictionKeys.PROBABILITIES: lambda: jax.nn.sigmoid(logits),
            PredictionKeys.CLASSES: lambda: all_class_ids(logits, self._n_classes),
        }
        return {k: values[k]() for k in _PRED_KEYS if k in keys}

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        return classifier_exports(predictions, self.class_names(), [PredictionKeys.CLASSES])

    def _class_key(self, template_id: str, template_name: str, class_id: int) -> str:
        if self._label_vocabulary is None:
            return self._summary_key(template_id % class_id)
        return self._summary_key(template_name % self._label_vocabulary[class_id])

    def _metric_placeholders(self) -> tuple[Array, Array, Array]:
        z = jnp.zeros((1, self._n_classes), jnp.float32)
        return z, z, jnp.zeros((1, 1))

    def _head_metrics(self, logits: Array, labels: Array, weights: ArrayLike) -> dict[str, Metric]:
        k = MetricKeys
        probabilities = jax.nn.sigmoid(logits)
        labels = jnp.asarray(labels, jnp.float32)
        w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), logits.shape[:-1] + (1,))
        out: dict[str, Metric] = {
            self._summary_key(k.AUC): _metrics.keras_auc(labels, probabilities, w),
            self._summary_key(k.AUC_PR): _metrics.keras_auc(labels, probabilities, w, curve="PR"),
        }
        for t in self._thresholds:
            out[self._summary_key(k.ACCURACY_AT_THRESHOLD % t)] = _metrics.binary_accuracy(
                labels, probabilities, w, t
            )
            precision, recall = _metrics.precision_recall_at(labels, probabilities, w, t)
            out[self._summary_key(k.PRECISION_AT_THRESHOLD % t)] = precision
            out[self._summary_key(k.RECALL_AT_THRESHOLD % t)] = recall
        for c in self._classes:
            p_c, l_c = probabilities[..., c : c + 1], labels[..., c : c + 1]
            out[self._class_key(k.PROBABILITY_MEAN_AT_CLASS, k.PROBABILITY_MEAN_AT_NAME, c)] = (
                _metrics.broadcast_mean(p_c, w)
            )
            out[self._class_key(k.AUC_AT_CLASS, k.AUC_AT_NAME, c)] = _metrics.keras_auc(l_c, p_c, w)
            out[self._class_key(k.AUC_PR_AT_CLASS, k.AUC_PR_AT_NAME, c)] = _metrics.keras_auc(
                l_c, p_c, w, curve="PR"
            )
        return out
