"""``MultiClassHead`` (``tf.estimator.MultiClassHead``): softmax cross entropy over
``n_classes`` logits, one integer label per example."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec import metrics as jmetrics
from jaxspec.export import ClassificationOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.heads._export_outputs import ClassNamesPredictOutput
from jaxspec.heads.base_head import Head
from jaxspec.heads.binary_class_head import all_class_ids, class_names
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiClassHeadArgs
from jaxspec.rules.head_keys import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
)

_PRED_KEYS = (
    PredictionKeys.LOGITS,
    PredictionKeys.PROBABILITIES,
    PredictionKeys.CLASS_IDS,
    PredictionKeys.CLASSES,
    PredictionKeys.ALL_CLASS_IDS,
    PredictionKeys.ALL_CLASSES,
)


class MultiClassHead(MultiClassHeadArgs, Head):
    """Multi-class classification, as ``tf.estimator.MultiClassHead`` in TF 2.15.

    Eval metrics: ``average_loss``, ``accuracy`` (and ``regularization_loss``), suffixed
    ``/name`` for a named head. Predictions: ``logits``, ``probabilities`` (softmax),
    ``class_ids`` (argmax, ``[batch, 1]``), ``classes``, ``all_class_ids``,
    ``all_classes``; as in ``BinaryClassHead``, ``classes``/``all_classes`` hold int32
    ids whose strings are ``class_names()``.

    Args:
      n_classes: number of classes, > 2.
      weight_column: None or the features key of the example weights.
      label_vocabulary: list/tuple of ``n_classes`` strings. Labels are then numpy strings
        or, inside a compiled step (JAX arrays hold no strings), integer ids; without a
        vocabulary, labels must be integers (TF's rule).
      loss_reduction: ``Reduction.SUM_OVER_BATCH_SIZE`` (default), ``SUM`` or ``AUTO``.
      loss_fn: ``loss_fn(labels, logits[, features])`` returning ``[batch, 1]``.
      name: the head's name.

    Raises:
      ValueError: n_classes None or <= 2, a vocabulary that is not a list/tuple of
        n_classes items, an invalid loss_reduction or loss_fn.
    """

    def class_names(self) -> np.ndarray:
        """The class strings: ``class_names()[i]`` is TF's string for class id ``i``."""
        return class_names(self._n_classes, self._label_vocabulary)

    def _processed_labels(self, logits: jax.Array, labels: Any) -> tuple[Any, Any]:
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is None:
            if not np.issubdtype(np.dtype(labels.dtype), np.integer):
                raise ValueError(f"labels must be integer class ids, got dtype {labels.dtype}.")
        else:
            labels = _checks.label_ids_from_vocabulary(labels, self._label_vocabulary)
        return jnp.asarray(labels), _checks.labels_in_range(labels, self._n_classes)

    def _unweighted_loss_and_weights(
        self, logits: jax.Array, label_ids: Any, features: Any
    ) -> tuple[Any, Any]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, label_ids, logits, features, 1)
        else:
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, label_ids[..., 0])[..., None]
        return loss, _checks.get_weights(features, self._weight_column, logits)

    def loss(
        self,
        labels: Any,
        logits: Any,
        features: Any = None,
        mode: Any = None,
        regularization_losses: Any = None,
    ) -> jax.Array:
        """The weighted, reduced softmax cross entropy plus the regularization losses."""
        logits = _checks.check_logits(logits, self._n_classes)
        label_ids, ok = self._processed_labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, label_ids, features)
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
        class_ids = jnp.argmax(logits, axis=-1)[..., None].astype(jnp.int32)
        values = {
            PredictionKeys.LOGITS: lambda: logits,
            PredictionKeys.PROBABILITIES: lambda: jax.nn.softmax(logits, axis=-1),
            PredictionKeys.CLASS_IDS: lambda: class_ids,
            PredictionKeys.CLASSES: lambda: class_ids,
            PredictionKeys.ALL_CLASS_IDS: lambda: all_class_ids(logits, self._n_classes),
            PredictionKeys.ALL_CLASSES: lambda: all_class_ids(logits, self._n_classes),
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
                predictions,
                {PredictionKeys.CLASSES: self.class_names(), PredictionKeys.ALL_CLASSES: self.class_names()},
            ),
        }

    def metrics(self, regularization_losses: Any = None) -> dict[str, Any]:
        """The empty metric states, keyed as TF's."""
        logits = jnp.zeros((1, self._n_classes), jnp.float32)
        ids = jnp.zeros((1, 1), jnp.int32)
        return _metrics.empty_states(
            lambda: self._batch_metrics(logits, ids, jnp.zeros((1, 1)), 1.0, regularization_losses, None)
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
        label_ids, ok = self._processed_labels(logits, labels)
        unweighted, weights = self._unweighted_loss_and_weights(logits, label_ids, features)
        batch = self._batch_metrics(logits, label_ids, unweighted, weights, regularization_losses, ok)
        return {key: eval_metrics[key].merge(state) for key, state in batch.items()}

    def _batch_metrics(
        self,
        logits: jax.Array,
        label_ids: Any,
        unweighted: Any,
        weights: Any,
        regularization_losses: Any,
        ok: Any,
    ) -> dict[str, Any]:
        k = MetricKeys
        class_ids = self.predictions(logits, [PredictionKeys.CLASS_IDS])[PredictionKeys.CLASS_IDS]
        w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), class_ids.shape)
        loss_mean = _metrics.broadcast_mean(unweighted, w)
        out = {
            self._summary_key(k.LOSS_MEAN): loss_mean.replace(total=_checks.nan_unless(ok, loss_mean.total)),
            self._summary_key(k.ACCURACY): jmetrics.accuracy(jnp.asarray(label_ids), class_ids, w),
        }
        if regularization_losses is not None:
            reg = _checks.sum_regularization(regularization_losses)
            out[self._summary_key(k.LOSS_REGULARIZATION)] = _metrics.regularization_mean(reg)
        return out
