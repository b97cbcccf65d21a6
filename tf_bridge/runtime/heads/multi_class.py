"""``MultiClassHead`` (``tf.estimator.MultiClassHead``): one logit per class, softmax cross
entropy, tf.estimator's metrics, predictions and export outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_args import check_prediction_keys
from jaxspec.rules.head_init import MultiClassHeadArgs
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
_VALID_KEYS = (P.LOGITS, P.PROBABILITIES, P.CLASS_IDS, P.CLASSES, P.ALL_CLASS_IDS, P.ALL_CLASSES)


class MultiClassHead(MultiClassHeadArgs, base_template.HeadTemplate):
    """Single-label classification over ``n_classes`` > 2 classes with softmax cross
    entropy (``tf.estimator.MultiClassHead``).

    Args:
      n_classes: the number of classes, > 2 (use BinaryClassHead for 2).
      weight_column: None, a feature key (str) or a ``tf.feature_column.numeric_column``
        giving per-example weights ``[D0, ..., DN]`` or ``[D0, ..., DN, 1]``.
      label_vocabulary: list/tuple of ``n_classes`` class names; labels are then those
        strings. Without it labels are integer class ids in ``[0, n_classes)``.
      loss_reduction: ``'sum_over_batch_size'`` (default), ``'sum'`` or ``'auto'``.
      loss_fn: ``(labels, logits[, features]) -> [D0, ..., DN, 1]`` unweighted losses; it
        gets the int class ids ``[D0, ..., DN, 1]`` as labels.
      name: suffix of the metric keys and the name scope; required inside a MultiHead.

    ``n_classes`` may also be a scalar integer tensor whose value is known while building
    (``tf.constant(3)``), as TF 2.15 accepted; ``logits_dimension`` is then that tensor.

    Raises:
      ValueError: n_classes None or <= 2, a label_vocabulary that is not a list/tuple or
        not of length n_classes, an unknown loss_reduction, or a bad loss_fn; an n_classes
        tensor whose value is unknown until run time (TF 2.15 took one).
      tf.errors.InvalidArgumentError: an n_classes tensor holding a value <= 2 (as TF).
    """

    def __init__(
        self,
        n_classes: int | tf.Tensor,
        weight_column: _checks.WeightColumn = None,
        label_vocabulary: Sequence[str] | None = None,
        loss_reduction: str = _checks.REDUCTION_SUM_OVER_BATCH_SIZE,
        loss_fn: Callable[..., Any] | None = None,
        name: str | None = None,
    ) -> None:
        given = n_classes
        super().__init__(
            _checks.static_n_classes(n_classes, 3),
            weight_column,
            label_vocabulary,
            loss_reduction,
            loss_fn,
            name,
        )
        self._logits_dimension = given  # TF 2.15 gave n_classes back as it was given

    def _static_logits_dimension(self) -> int:
        return self._n_classes

    def _labels(self, logits: tf.Tensor, labels: PyTree) -> tf.Tensor:
        """Class ids ``[D0, ..., DN, 1]`` in ``[0, n_classes)``."""
        labels = _checks.check_labels(labels, logits, 1)
        if self._label_vocabulary is None:
            if not labels.dtype.is_integer:
                raise ValueError(
                    f"labels must be integer class ids (no label_vocabulary); got dtype {labels.dtype.name}."
                )
            ids = labels
        else:
            ids = base.string_labels(labels, self._label_vocabulary)
        return _checks.check_label_range(
            ids,
            self._n_classes,
            message=f"labels must be class ids in [0, {self._n_classes - 1}] (or in label_vocabulary)",
        )

    def _unweighted_loss_and_weights(
        self, logits: tf.Tensor, label_ids: tf.Tensor, features: PyTree
    ) -> tuple[tf.Tensor, tf.Tensor | float]:
        if self._loss_fn:
            loss = _checks.call_loss_fn(self._loss_fn, label_ids, logits, features, 1)
        else:
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.squeeze(label_ids, -1), logits=logits
            )
            loss = tf.expand_dims(loss, -1)
        return loss, _checks.weights_for(features, self._weight_column, logits)

    def predictions(self, logits: TensorLike, keys: Sequence[str] | None = None) -> dict[str, tf.Tensor]:
        """``logits``, ``probabilities`` [.., n_classes], ``class_ids`` int64 [.., 1],
        ``classes`` string [.., 1], ``all_class_ids`` int32 and ``all_classes`` string
        [batch, n_classes]; only ``keys`` when given (ValueError for another key)."""
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
                out[P.PROBABILITIES] = tf.nn.softmax(logits, name=P.PROBABILITIES)
            if P.CLASS_IDS in keys or P.CLASSES in keys:
                class_ids = tf.expand_dims(tf.math.argmax(logits, axis=-1, name=P.CLASS_IDS), -1)
                if P.CLASS_IDS in keys:
                    out[P.CLASS_IDS] = class_ids
                if P.CLASSES in keys:
                    if self._label_vocabulary:
                        out[P.CLASSES] = base.class_name_lookup(self._label_vocabulary, class_ids)
                    else:
                        out[P.CLASSES] = tf.strings.as_string(class_ids, name="str_classes")
            if P.ALL_CLASS_IDS in keys:
                out[P.ALL_CLASS_IDS] = base.all_class_ids(logits, self._n_classes)
            if P.ALL_CLASSES in keys:
                out[P.ALL_CLASSES] = base.all_classes(logits, self._n_classes, self._label_vocabulary)
        return out

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, KerasMetric]:
        """Fresh tf_keras metrics: ``average_loss``, ``accuracy`` and, with regularization
        losses, ``regularization_loss`` (each ``/name``-suffixed)."""
        m, k, key = base.keras_metrics(), MetricKeys, self._summary_key
        out = {key(k.LOSS_MEAN): m.Mean(name=k.LOSS_MEAN)}
        if regularization_losses is not None:
            out[key(k.LOSS_REGULARIZATION)] = m.Mean(name=k.LOSS_REGULARIZATION)
        out[key(k.ACCURACY)] = m.Accuracy(name=k.ACCURACY)
        return out

    def _update_head_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        logits: tf.Tensor,
        labels: tf.Tensor,
        weights: tf.Tensor | float,
    ) -> None:
        class_ids = self.predictions(logits, [P.CLASS_IDS])[P.CLASS_IDS]
        eval_metrics[self._summary_key(MetricKeys.ACCURACY)].update_state(
            y_true=labels, y_pred=class_ids, sample_weight=weights
        )

    def _export_outputs(self, predictions: dict[str, tf.Tensor]) -> dict[str, ExportOutput]:
        """``serving_default`` and ``classification`` (probabilities and class names) and
        ``predict`` (every prediction)."""
        return base_template.classifier_exports(predictions, self._n_classes, self._label_vocabulary)
