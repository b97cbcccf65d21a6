"""``MultiHead`` (``tf.estimator.MultiHead``): several named heads on one logits tensor
(split along the last axis in the heads' order) or on a dict of logits per head."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_init import MultiHeadArgs
from jaxspec.rules.head_keys import DEFAULT_SERVING_KEY, PREDICT_SERVING_KEY, MetricKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import base
from tf_bridge.runtime.spec import EstimatorSpec, ModeKeys, PredictOutput

TensorLike: TypeAlias = tf.types.experimental.TensorLike

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric
    from tf_keras.optimizers.legacy import Optimizer as KerasOptimizer


def _no_op_train_fn(loss: tf.Tensor) -> tf.Operation:
    del loss
    return tf.no_op()


class MultiHead(MultiHeadArgs, base.Head):
    """Several named heads trained together (``tf.estimator.MultiHead``).

    The loss is the sum of the heads' losses, each times its ``head_weights`` entry;
    labels are a dict of head name to labels; predictions are keyed ``(head name, key)``;
    eval metrics are the heads' (``<key>/<head name>``) plus ``loss/<head name>``;
    PREDICT exports the first head's default output as ``serving_default``, every head's
    outputs as ``<head name>`` (its default) and ``<head name>/<key>``, and ``predict``
    with every head's predictions as ``<head name>/<key>``.

    Args:
      heads: a non-empty list/tuple of heads, each with a name.
      head_weights: floats, one per head, or None (all 1).

    Raises:
      ValueError: no heads, a head without a name, or head_weights of another length.
    """

    def _split_logits(self, logits: TensorLike) -> dict[str, tf.Tensor]:
        with tf.name_scope("split_logits"):
            logits = tf.convert_to_tensor(logits)
            dims = [h.logits_dimension for h in self._heads]
            last = logits.shape[-1] if logits.shape.rank else None
            if last is not None and last != sum(dims):
                raise ValueError(
                    f"logits of shape {logits.shape.as_list()} do not split among the heads: their logits "
                    f"dimensions {dims} sum to {sum(dims)}, the last dimension is {last}."
                )
            parts = tf.split(logits, dims, axis=-1)
            return {h.name: part for h, part in zip(self._heads, parts, strict=True)}

    def loss(
        self,
        labels: dict[str, tf.types.experimental.TensorLike],
        logits: tf.types.experimental.TensorLike | dict[str, tf.types.experimental.TensorLike],
        features: PyTree = None,
        mode: str | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> tf.Tensor:
        """The heads' losses times their weights, summed, plus the regularization losses.

        Args:
          labels: dict of head name to that head's labels.
          logits: ``[D0, ..., DN, logits_dimension]`` or dict of head name to logits.

        Raises:
          ValueError: logits that do not split, labels not a dict, a head missing from
            logits or labels; or what a head raises.
        """
        logits_dict = self._logits_dict(logits, labels)
        if labels is None:
            raise ValueError("labels of a MultiHead must be a dict of head name to labels; got None.")
        losses = [
            h.loss(logits=logits_dict[h.name], labels=labels[h.name], features=features, mode=mode)
            for h in self._heads
        ]
        with tf.name_scope("merge_losses"):
            if self._head_weights:
                losses = [
                    tf.math.multiply(loss, w) for loss, w in zip(losses, self._head_weights, strict=True)
                ]
            return base.add_regularization(tf.math.add_n(losses), regularization_losses)

    def predictions(
        self, logits: TensorLike, keys: Sequence[str] | None = None
    ) -> dict[tuple[str, str], tf.Tensor]:
        """Every head's predictions keyed ``(head name, key)`` (``keys`` is not used, as in TF)."""
        del keys
        logits_dict = self._logits_dict(logits)
        out: dict[tuple[str, str], tf.Tensor] = {}
        with tf.name_scope("merge_pred"):
            for h in self._heads:
                for k, v in h.predictions(logits=logits_dict[h.name]).items():
                    out[(h.name, k)] = v
        return out

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, KerasMetric]:
        """Fresh tf_keras Means: ``loss/<head name>`` per head and, with regularization
        losses, ``regularization_loss/<name>``; the heads' own metrics join in update_metrics."""
        m = base.keras_metrics()
        out: dict[str, Any] = {}
        if regularization_losses is not None:
            key = self._summary_key(MetricKeys.LOSS_REGULARIZATION)
            out[key] = m.Mean(name=MetricKeys.LOSS_REGULARIZATION)
        for h in self._heads:
            key = f"{MetricKeys.LOSS}/{h.name}"
            out[key] = m.Mean(name=key)
        return out

    def update_metrics(
        self,
        eval_metrics: dict[str, KerasMetric],
        features: PyTree,
        logits: tf.types.experimental.TensorLike | dict[str, tf.types.experimental.TensorLike],
        labels: dict[str, tf.types.experimental.TensorLike],
        mode: str | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> dict[str, KerasMetric]:
        """Update ``metrics()``'s dict with one batch and add every head's updated metrics."""
        del mode
        logits_dict = self._logits_dict(logits, labels)
        total = base.regularization_total(regularization_losses)
        if total is not None:
            eval_metrics[self._summary_key(MetricKeys.LOSS_REGULARIZATION)].update_state(values=total)
        for h in self._heads:
            head_logits, head_labels = logits_dict[h.name], labels[h.name]
            loss = h.loss(logits=head_logits, labels=head_labels, features=features)
            eval_metrics[f"{MetricKeys.LOSS}/{h.name}"].update_state(values=loss)
            updated = h.update_metrics(h.metrics(), features, head_logits, head_labels)
            eval_metrics.update(updated or {})
        return eval_metrics

    def create_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: tf.types.experimental.TensorLike | dict[str, tf.types.experimental.TensorLike],
        labels: dict[str, tf.types.experimental.TensorLike] | None = None,
        optimizer: KerasOptimizer | None = None,
        trainable_variables: Sequence[tf.Variable] | None = None,
        train_op_fn: Callable[[tf.Tensor], tf.Operation] | None = None,
        update_ops: Sequence[tf.Operation] | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> EstimatorSpec:
        """The ``tf_bridge.EstimatorSpec`` for ``mode`` (arguments as ``Head.create_estimator_spec``;
        labels a dict of head name to labels).

        Raises:
          ValueError: an unknown mode, or as ``loss`` and the heads.
        """
        with tf.name_scope(self.name or "multi_head"):
            logits_dict = self._logits_dict(logits, labels)
            specs = []
            if mode in (ModeKeys.PREDICT, ModeKeys.TRAIN):
                specs = [
                    h.create_estimator_spec(
                        features=features,
                        mode=mode,
                        logits=logits_dict[h.name],
                        labels=labels[h.name] if labels else None,
                        train_op_fn=_no_op_train_fn,
                    )
                    for h in self._heads
                ]
            predictions = self.predictions(logits)
            if mode == ModeKeys.PREDICT:
                return EstimatorSpec(
                    mode=ModeKeys.PREDICT, predictions=predictions, export_outputs=self._merged_exports(specs)
                )
            loss = self.loss(labels, logits, features, mode, regularization_losses)
            if mode == ModeKeys.EVAL:
                metrics = self.update_metrics(
                    self.metrics(regularization_losses=regularization_losses),
                    features,
                    logits,
                    labels,
                    regularization_losses=regularization_losses,
                )
                return EstimatorSpec(
                    mode=ModeKeys.EVAL, predictions=predictions, loss=loss, eval_metric_ops=metrics
                )
            if mode == ModeKeys.TRAIN:
                op = base.train_op(
                    optimizer, trainable_variables, train_op_fn, update_ops, loss, self.loss_reduction
                )
                base.train_summaries(loss, regularization_losses)
                merged: dict[str, Any] = {}
                for spec in specs:
                    merged.update(spec.eval_metric_ops or {})
                return EstimatorSpec(
                    mode=ModeKeys.TRAIN,
                    loss=loss,
                    train_op=op,
                    predictions=predictions,
                    eval_metric_ops=merged,
                )
            raise ValueError(f"mode must be one of ModeKeys TRAIN, EVAL, PREDICT; got {mode!r}.")

    def _merged_exports(self, specs: Sequence[EstimatorSpec]) -> dict[str, Any]:
        first = specs[0].export_outputs
        if len(first) == 1:
            default = next(iter(first.values()))
        elif DEFAULT_SERVING_KEY in first:
            default = first[DEFAULT_SERVING_KEY]
        else:
            raise ValueError(
                f"head {self._heads[0].name!r} gave no default export output ({DEFAULT_SERVING_KEY!r}); "
                f"it gave {sorted(first)}."
            )
        exports: dict[str, Any] = {DEFAULT_SERVING_KEY: default}
        merged_predict: dict[str, tf.Tensor] = {}
        for h, spec in zip(self._heads, specs, strict=True):
            for k, v in spec.export_outputs.items():
                exports[h.name if k == DEFAULT_SERVING_KEY else f"{h.name}/{k}"] = v
                if k == PREDICT_SERVING_KEY and isinstance(v, PredictOutput):
                    for kp, vp in v.outputs.items():
                        merged_predict[f"{h.name}/{kp}"] = vp
        exports[PREDICT_SERVING_KEY] = PredictOutput(merged_predict)
        return exports
