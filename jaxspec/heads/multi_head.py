"""``MultiHead`` (``tf.estimator.MultiHead``): several named heads on one model, their
logits side by side on the last axis (or a dict by head name)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec.export import ExportOutput, PredictOutput
from jaxspec.export.export_output import Arrays
from jaxspec.heads import _checks, _metrics
from jaxspec.heads._export_outputs import ClassNamesPredictOutput, prefixed_class_names
from jaxspec.heads.base_head import Head, Logits, Regularizer, array_logits
from jaxspec.metrics import Metric, current_padding_mask, drop_padding
from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.head_init import MultiHeadArgs
from jaxspec.rules.head_keys import DEFAULT_SERVING_KEY, PREDICT_SERVING_KEY, MetricKeys, Reduction
from jaxspec.spec import TPUEstimatorSpec
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree


class MultiHead(MultiHeadArgs, Head):
    """Several heads trained together, as ``tf.estimator.MultiHead`` in TF 2.15.

    The loss is the sum of the heads' losses (each times its ``head_weights`` entry), plus
    the regularization losses. Labels are a dict by head name; logits a dict by head name
    or one array ``[batch, sum of the heads' logits_dimension]`` split in head order.
    Eval metrics: ``loss/<head name>`` (the mean of each head's loss) and every head's own
    metrics (already suffixed with its name), and ``regularization_loss/<joined names>``.
    Predictions are keyed ``(head name, key)``. Export outputs: ``serving_default`` (the
    first head's default), ``<head name>`` and ``<head name>/<key>`` for each head's
    outputs, and ``predict`` with every head's predictions as ``<head name>/<key>``.

    Args:
      heads: the heads, each with a name.
      head_weights: None or one float per head.

    Raises:
      ValueError: no heads, a head without a name, head_weights of another length.
    """

    def _split_logits(self, logits: ArrayLike) -> dict[str, Array]:
        dims = [h.logits_dimension for h in self._heads]
        shape = tuple(np.shape(logits))
        if not shape or shape[-1] != sum(dims):
            raise ValueError(
                f"cannot split logits of shape {shape} among heads of logits dimensions {dims}: "
                f"the last axis must be {sum(dims)}."
            )
        logits = jnp.asarray(logits)
        out, start = {}, 0
        for head, d in zip(self._heads, dims, strict=True):
            out[head.name] = logits[..., start : start + d]
            start += d
        return out

    def loss(
        self,
        labels: PyTree,
        logits: ArrayLike | dict[str, ArrayLike],
        features: PyTree = None,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayLike] | None = None,
    ) -> jax.Array:
        """The (head-weighted) sum of the heads' losses plus the regularization losses."""
        logits_dict = self._logits_dict(logits, labels)
        losses = [h.loss(labels[h.name], logits_dict[h.name], features, mode) for h in self._heads]
        if self._head_weights:
            losses = [loss * w for loss, w in zip(losses, self._head_weights, strict=True)]
        return _checks.add_regularization(sum(losses[1:], losses[0]), regularization_losses)

    def predictions(
        self, logits: ArrayLike | dict[str, ArrayLike], keys: Sequence[str] | None = None
    ) -> dict[tuple[str, str], Array]:
        """Every head's predictions, keyed ``(head name, key)``."""
        logits_dict = self._logits_dict(logits)
        return {(h.name, k): v for h in self._heads for k, v in h.predictions(logits_dict[h.name]).items()}

    def metrics(self, regularization_losses: Sequence[ArrayLike] | None = None) -> dict[str, Metric]:
        """The empty states of ``loss/<head>``, the heads' metrics and the regularization loss."""
        out: dict[str, Metric] = {}
        if regularization_losses is not None:
            reg = _checks.sum_regularization(regularization_losses)
            out[self._summary_key(MetricKeys.LOSS_REGULARIZATION)] = _metrics.empty_states(
                lambda: {"r": _metrics.regularization_mean(reg)}
            )["r"]
        for head in self._heads:
            out[f"{MetricKeys.LOSS}/{head.name}"] = _metrics.empty_states(
                lambda: {"m": _metrics.regularization_mean(jnp.zeros(()))}
            )["m"]
            out.update(head.metrics())
        return out

    def update_metrics(
        self,
        eval_metrics: dict[str, Metric],
        features: PyTree,
        logits: ArrayLike | dict[str, ArrayLike],
        labels: PyTree,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayLike] | None = None,
    ) -> dict[str, Metric]:
        """``eval_metrics`` merged with the states of this batch. ``loss/<head>`` is the
        mean over batches of the head's loss (on the mesh, of each replica's rows)."""
        logits_dict = self._logits_dict(logits, labels)
        out = dict(eval_metrics)
        if regularization_losses is not None:
            key = self._summary_key(MetricKeys.LOSS_REGULARIZATION)
            reg = _checks.sum_regularization(regularization_losses)
            out[key] = eval_metrics[key].merge(_metrics.regularization_mean(reg))
        for head in self._heads:
            head_logits, head_labels = logits_dict[head.name], labels[head.name]
            key = f"{MetricKeys.LOSS}/{head.name}"
            out[key] = eval_metrics[key].merge(_head_loss_state(head, head_labels, head_logits, features))
            head_states = {k: eval_metrics[k] for k in head.metrics()}
            out.update(head.update_metrics(head_states, features, head_logits, head_labels))
        return out

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        raise NotImplementedError  # built from the heads' specs in create_tpu_estimator_spec

    def create_tpu_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: Logits,
        labels: PyTree = None,
        optimizer: optax.GradientTransformation | None = None,
        trainable_variables: PyTree = None,
        train_op_fn: Callable[[PyTree], PyTree] | None = None,
        update_ops: Sequence[Callable[[PyTree], PyTree]] | None = None,
        regularization_losses: Sequence[Regularizer] | None = None,
    ) -> TPUEstimatorSpec:
        """As ``Head.create_tpu_estimator_spec``, with MultiHead's export outputs in
        PREDICT (TF's MultiHead has no TPU spec; jaxspec's runs on the mesh too)."""
        if mode != ModeKeys.PREDICT:
            return super().create_tpu_estimator_spec(
                features, mode, logits, labels, optimizer, trainable_variables, train_op_fn, update_ops,
                regularization_losses,
            )  # fmt: skip
        logits = array_logits(logits, mode)
        logits_dict = self._logits_dict(logits)
        export_outputs: dict[str, ExportOutput] = {}
        merged: dict[str, Arrays] = {}
        names: dict[str, np.ndarray] = {}
        for i, head in enumerate(self._heads):
            head_outputs = head._export_outputs(head.predictions(logits_dict[head.name]))
            if i == 0:
                export_outputs[DEFAULT_SERVING_KEY] = _default_output(head_outputs, head.name)
            for k, v in head_outputs.items():
                export_outputs[head.name if k == DEFAULT_SERVING_KEY else f"{head.name}/{k}"] = v
                if k == PREDICT_SERVING_KEY and isinstance(v, PredictOutput):
                    merged.update({f"{head.name}/{kp}": vp for kp, vp in v.outputs.items()})
                    names.update(prefixed_class_names(v, head.name))
        export_outputs[PREDICT_SERVING_KEY] = ClassNamesPredictOutput(merged, names)
        return TPUEstimatorSpec(
            mode=mode, predictions=self.predictions(logits), export_outputs=export_outputs
        )


def _head_loss_state(head: Head, labels: PyTree, logits: Array, features: PyTree) -> Metric:
    """The Mean state of ``loss/<head>`` for one batch: the head's loss, weighted 1 per
    batch. Under a padding mask with padded rows (the mesh's short last batch) the loss is
    reduced over the real rows only and the batch weighs its share of real rows; a head
    without ``_weighted_losses`` (a user's) gives its plain loss."""
    mask = current_padding_mask()
    weighted = getattr(head, "_weighted_losses", None)
    if mask is None or weighted is None:
        return _metrics.regularization_mean(head.loss(labels, logits, features))
    values = drop_padding(weighted(labels, logits, features))
    total = jnp.sum(values)
    if head.loss_reduction != Reduction.SUM:
        per_row = values.size // max(values.shape[0], 1)
        total = total / jnp.maximum(jnp.sum(mask) * per_row, 1.0)
    return _metrics.regularization_mean(total)


def _default_output(outputs: dict[str, ExportOutput], head_name: str) -> ExportOutput:
    if len(outputs) == 1:
        return next(iter(outputs.values()))
    if DEFAULT_SERVING_KEY not in outputs:
        raise ValueError(
            f"head {head_name!r} has no {DEFAULT_SERVING_KEY!r} export output among {sorted(outputs)}."
        )
    return outputs[DEFAULT_SERVING_KEY]
