"""``MultiLabelHead`` (``tf.estimator.MultiLabelHead``): independent sigmoid cross entropy
per class, labels as a multi-hot indicator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec.export import ClassificationOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.heads._export_outputs import ClassNamesPredictOutput
from jaxspec.heads.base_head import Head
from jaxspec.heads.binary_class_head import all_class_ids, class_names
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiLabelHeadArgs
from jaxspec.rules.head_keys import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)

_PRED_KEYS = (PredictionKeys.LOGITS, PredictionKeys.PROBABILITIES, PredictionKeys.CLASSES)


class MultiLabelHead(MultiLabelHeadArgs, Head):
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

    def _sparse_indicator(self, labels: Any) -> tuple[jax.Array, Any]:
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

    def _processed_labels(self, logits: jax.Array, labels: Any) -> tuple[jax.Array, Any]:
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
        self, logits: jax.Array, labels: jax.Array, features: Any
    ) -> tuple[Any, Any]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, labels, logits, features, 1)
        else:
            per_class = optax.sigmoid_binary_cross_entropy(logits, labels.astype(jnp.float32))
            loss = jnp.mean(per_class, axis=-1, keepdims=True)
        return loss, _checks.get_weights(features, self._weight_column, logits)

    def loss(
        self,
        labels: Any,
        logits: Any,
        features: Any = None,
        mode: Any = None,
        regularization_losses: Any = None,
    ) -> jax.Array:
        """The weighted, reduced per-example mean sigmoid cross entropy plus the
        regularization losses."""
        logits = _checks.check_logits(logits, self._n_classes)
        labels, ok = self._processed_labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, labels, features)
        loss = _checks.reduce_weighted_loss(unweighted, weights, self._loss_reduction)
        return _checks.nan_unless(ok, _checks.add_regularization(loss, regularization_losses))

    def _weighted_losses(self, labels: Any, logits: Any, features: Any = None) -> jax.Array:
        """The per-element ``loss * weight`` before reduction (NaN for traced labels out of
        range), what a MultiHead's ``loss/<name>`` reduces over the real rows on the mesh."""
        logits = _checks.check_logits(logits, self._n_classes)
        labels, ok = self._processed_labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, labels, features)
        return _checks.nan_unless(
            ok, jnp.asarray(unweighted, jnp.float32) * jnp.asarray(weights, jnp.float32)
        )

    def predictions(self, logits: Any, keys: Sequence[str] | None = None) -> dict[str, jax.Array]:
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

    def _export_outputs(self, predictions: dict[str, jax.Array]) -> dict[str, Any]:
        classifier = ClassificationOutput(
            scores=predictions[PredictionKeys.PROBABILITIES], classes=self.class_names()
        )
        return {
            DEFAULT_SERVING_KEY: classifier,
            CLASSIFY_SERVING_KEY: classifier,
            PREDICT_SERVING_KEY: ClassNamesPredictOutput(
                predictions, {PredictionKeys.CLASSES: self.class_names()}
            ),
        }

    def _class_key(self, template_id: str, template_name: str, class_id: int) -> str:
        if self._label_vocabulary is None:
            return self._summary_key(template_id % class_id)
        return self._summary_key(template_name % self._label_vocabulary[class_id])

    def metrics(self, regularization_losses: Any = None) -> dict[str, Any]:
        """The empty metric states, keyed as TF's."""
        z = jnp.zeros((1, self._n_classes), jnp.float32)
        return _metrics.empty_states(
            lambda: self._batch_metrics(z, z, jnp.zeros((1, 1)), 1.0, regularization_losses, None)
        )

    def update_metrics(
        self,
        eval_metrics: dict[str, Any],
        features: Any,
        logits: Any,
        labels: Any,
        regularization_losses: Any = None,
        mode: Any = None,
    ) -> dict[str, Any]:
        """``eval_metrics`` merged with the states of this batch."""
        logits = _checks.check_logits(logits, self._n_classes)
        labels, ok = self._processed_labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, labels, features)
        batch = self._batch_metrics(logits, labels, unweighted, weights, regularization_losses, ok)
        return {key: eval_metrics[key].merge(state) for key, state in batch.items()}

    def _batch_metrics(
        self,
        logits: jax.Array,
        labels: Any,
        unweighted: Any,
        weights: Any,
        regularization_losses: Any,
        ok: Any,
    ) -> dict[str, Any]:
        k = MetricKeys
        probabilities = jax.nn.sigmoid(logits)
        labels = jnp.asarray(labels, jnp.float32)
        w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), logits.shape[:-1] + (1,))
        loss_mean = _metrics.broadcast_mean(unweighted, w)
        out = {
            self._summary_key(k.LOSS_MEAN): loss_mean.replace(total=_checks.nan_unless(ok, loss_mean.total)),
            self._summary_key(k.AUC): _metrics.keras_auc(labels, probabilities, w),
            self._summary_key(k.AUC_PR): _metrics.keras_auc(labels, probabilities, w, curve="PR"),
        }
        if regularization_losses is not None:
            reg = _checks.sum_regularization(regularization_losses)
            out[self._summary_key(k.LOSS_REGULARIZATION)] = _metrics.regularization_mean(reg)
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
