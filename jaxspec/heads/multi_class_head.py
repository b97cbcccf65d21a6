"""``MultiClassHead`` (``tf.estimator.MultiClassHead``): softmax cross entropy over
``n_classes`` logits, one integer label per example."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec import metrics as jmetrics
from jaxspec.export import ExportOutput
from jaxspec.heads import _checks
from jaxspec.heads._export_outputs import classifier_exports
from jaxspec.heads.base_head import HeadTemplate
from jaxspec.heads.binary_class_head import all_class_ids, class_names
from jaxspec.metrics import Metric
from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiClassHeadArgs
from jaxspec.rules.head_keys import (
    MetricKeys,
    PredictionKeys,
)
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

_PRED_KEYS = (
    PredictionKeys.LOGITS,
    PredictionKeys.PROBABILITIES,
    PredictionKeys.CLASS_IDS,
    PredictionKeys.CLASSES,
    PredictionKeys.ALL_CLASS_IDS,
    PredictionKeys.ALL_CLASSES,
)


class MultiClassHead(MultiClassHeadArgs, HeadTemplate):
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

    def _processed_labels(self, logits: Array, labels: PyTree) -> tuple[Array, Array | None]:
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is None:
            if not np.issubdtype(np.dtype(labels.dtype), np.integer):
                raise ValueError(f"labels must be integer class ids, got dtype {labels.dtype}.")
        else:
            labels = _checks.label_ids_from_vocabulary(labels, self._label_vocabulary)
        return jnp.asarray(labels), _checks.labels_in_range(labels, self._n_classes)

    def _unweighted_loss_and_weights(
        self, logits: Array, label_ids: Array, features: PyTree
    ) -> tuple[Array, ArrayLike]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, label_ids, logits, features, 1)
        else:
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, label_ids[..., 0])[..., None]
        return loss, _checks.get_weights(features, self._weight_column, logits)

    def predictions(self, logits: ArrayLike, keys: Sequence[str] | None = None) -> dict[str, Array]:
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

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        return classifier_exports(
            predictions, self.class_names(), [PredictionKeys.CLASSES, PredictionKeys.ALL_CLASSES]
        )

    def _metric_placeholders(self) -> tuple[Array, Array, Array]:
        logits = jnp.zeros((1, self._n_classes), jnp.float32)
        return logits, jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1))

    def _head_metrics(self, logits: Array, labels: Array, weights: ArrayLike) -> dict[str, Metric]:
        k = MetricKeys
        class_ids = self.predictions(logits, [PredictionKeys.CLASS_IDS])[PredictionKeys.CLASS_IDS]
        w = jnp.broadcast_to(jnp.asarray(weights, jnp.float32), class_ids.shape)
        return {self._summary_key(k.ACCURACY): jmetrics.accuracy(labels, class_ids, w)}
