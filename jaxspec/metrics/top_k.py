"""Top-k metrics: precision/recall at k, average precision at k (tf.compat.v1.metrics).

Labels are dense: ``[D1, ..., DN, num_labels]`` class ids per row (or ``[D1, ..., DN]``,
one id per row). TF also takes a SparseTensor; the dense form with padding ids is the JAX
equivalent, and it follows TF's set semantics for dense labels exactly: each row's labels
form a *set* (duplicates count once), and every id in it counts, so a padding id such as
-1, or an id >= num_classes, is a label that is never retrieved (a false negative for
recall). Predicted ids form a set too. ``average_precision_at_k`` maps ids >= num_classes
to -1 and counts only ids >= 0 as relevant, as TF does; TF divides by the number of
such ids including duplicates, and so do we. ``metrics_collections``,
``updates_collections`` and ``name`` are accepted for compatibility and unused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxspec.metrics._shapes import check_broadcastable
from jaxspec.metrics.base import Metric, apply_padding_mask, batch_constructor, drop_padding
from jaxspec.spec.fn_types import ArrayLike

_M = TypeVar("_M", bound=Metric)


def _first_occurrence(ids: jax.Array) -> jax.Array:
    """bool mask of the entries of the last axis that do not repeat an earlier entry."""
    n = ids.shape[-1]
    earlier = jnp.tril(jnp.ones((n, n), bool), -1)  # earlier[j, i]: i < j
    same = ids[..., :, None] == ids[..., None, :]
    return ~jnp.any(same & earlier, axis=-1)


def _expand_labels(labels: ArrayLike, ids: jax.Array) -> jax.Array:
    """Labels with ``ids``' rank: a missing last axis is added, as TF's ``_maybe_expand_labels``.

    Raises:
      ValueError: the ranks differ by anything but 0 or 1.
    """
    labels = jnp.asarray(labels)
    if labels.ndim == ids.ndim:
        return labels
    if labels.ndim + 1 == ids.ndim:
        return labels[..., None]
    raise ValueError(
        f"labels of shape {tuple(labels.shape)} do not fit predictions of shape {tuple(ids.shape)}: labels "
        "need the rank of predictions, or one less."
    )


def _set_counts(
    labels: jax.Array, ids: jax.Array, class_id: int | None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per row ``(tp, fp, fn)`` of the predicted id set against the label set (float32)."""
    labels = labels.astype(jnp.int32)
    ids = ids.astype(jnp.int32)
    if class_id is not None:
        in_labels = jnp.any(labels == class_id, axis=-1)
        in_ids = jnp.any(ids == class_id, axis=-1)
        tp, fp, fn = in_labels & in_ids, in_ids & ~in_labels, in_labels & ~in_ids
        return tp.astype(jnp.float32), fp.astype(jnp.float32), fn.astype(jnp.float32)
    id_first = _first_occurrence(ids)
    hit = jnp.any(ids[..., :, None] == labels[..., None, :], axis=-1)
    tp = jnp.sum(id_first & hit, axis=-1).astype(jnp.float32)
    fp = jnp.sum(id_first & ~hit, axis=-1).astype(jnp.float32)
    fn = jnp.sum(_first_occurrence(labels), axis=-1).astype(jnp.float32) - tp
    return tp, fp, fn


def _row_weights(weights: ArrayLike | None, per_row: jax.Array) -> jax.Array:
    """Weights for per-row values (TF's ``assert_broadcastable``) times the padding mask.

    Raises:
      ValueError: weights do not broadcast to the rows.
    """
    if weights is not None:
        weights = jnp.asarray(weights, jnp.float32)
        check_broadcastable(weights, per_row)
    return apply_padding_mask(per_row, weights)


def _top_k(predictions: ArrayLike, k: int) -> jax.Array:
    """Indices of the k largest predictions on the last axis (ties: lower index first, as TF).

    Raises:
      ValueError: k < 1 or k exceeds the number of classes (TF fails when building).
    """
    predictions = jnp.asarray(predictions)
    if predictions.ndim < 1:
        raise ValueError("predictions need at least one axis (the classes).")
    if int(k) < 1 or int(k) > predictions.shape[-1]:
        raise ValueError(f"k must be in [1, {predictions.shape[-1]}] (the number of classes), got {k}.")
    return jax.lax.top_k(predictions, int(k))[1]


class PrecisionAtK(Metric):
    """State of ``precision_at_k`` / ``sparse_precision_at_k``: weighted ``tp`` and ``fp``
    (float32 scalars); static ``k`` and ``class_id``."""

    tp: jax.Array
    fp: jax.Array
    k: int | None = struct.field(pytree_node=False)
    class_id: int | None = struct.field(pytree_node=False)

    from_batch = batch_constructor("precision_at_k")

    def compute(self) -> jax.Array:
        """``tp / (tp + fp)``; NaN when nothing was retrieved (TF divides without a guard)."""
        return self.tp / (self.tp + self.fp)


class PrecisionAtTopK(PrecisionAtK):
    """State of ``precision_at_top_k`` (takes predicted ids instead of scores)."""

    from_batch = batch_constructor("precision_at_top_k")


class RecallAtK(Metric):
    """State of ``recall_at_k``: weighted ``tp`` and ``fn`` (float32 scalars); static
    ``k`` and ``class_id``."""

    tp: jax.Array
    fn: jax.Array
    k: int | None = struct.field(pytree_node=False)
    class_id: int | None = struct.field(pytree_node=False)

    from_batch = batch_constructor("recall_at_k")

    def compute(self) -> jax.Array:
        """``tp / (tp + fn)``; NaN when there was no label (TF divides without a guard)."""
        return self.tp / (self.tp + self.fn)


class RecallAtTopK(RecallAtK):
    """State of ``recall_at_top_k`` (takes predicted ids instead of scores)."""

    from_batch = batch_constructor("recall_at_top_k")


def _precision_recall(
    labels: ArrayLike, ids: jax.Array, class_id: int | None, weights: ArrayLike | None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    labels = _expand_labels(labels, ids)
    tp, fp, fn = _set_counts(labels, ids, class_id)
    w = _row_weights(weights, tp)
    return jnp.sum(tp * w), jnp.sum(fp * w), jnp.sum(fn * w)


_TOP_K_DOC = """{summary} (``tf.compat.v1.metrics.{name}``).

    Args:
      labels: int array ``[D1, ..., DN, num_labels]`` or ``[D1, ..., DN]`` of class ids
        (see the module docstring for padding ids and duplicates).
      {ranked}
      class_id: None to count every class, or the one class id to count (the others
        are ignored, as TF).
      weights: None or weights broadcastable to ``[D1, ..., DN]`` (rank 0 or N, axes 1
        or matching).
      metrics_collections, updates_collections, name: accepted for compatibility, unused.

    Returns:
      A ``{state}`` state; value a float32 scalar, NaN when {nan}, as TF.

    Raises:
      ValueError: {raises}label rank does not fit; weights do not broadcast.
    """
_BY_SCORES = """predictions: float scores ``[D1, ..., DN, num_classes]``; the top k are taken.
      k: number of top classes, 1 <= k <= num_classes."""
_BY_IDS = """predictions_idx: int ids ``[D1, ..., DN, k]``, e.g. from ``jax.lax.top_k``.
      k: names the metric only (as in TF); every id in ``predictions_idx`` counts
        (duplicates once)."""


def _top_k_factory(cls: type[_M], summary: str, by_ids: bool, nan: str) -> Callable[..., _M]:
    """The metric function of ``cls`` (precision or recall, from scores or from ids):
    TF's signature, the docstring of the table's row."""
    doc = cls.from_batch.__doc__ or f"``{cls.__name__}(``"  # no docstrings under python -OO
    function_name = doc.split("``")[1].split("(")[0]
    other = "fp" if "fp" in cls.__dataclass_fields__ else "fn"

    def state(
        labels: ArrayLike, ids: jax.Array, k: int | None, class_id: int | None, weights: ArrayLike | None
    ) -> _M:
        tp, fp, fn = _precision_recall(labels, ids, class_id, weights)
        return cls(tp=tp, **{other: fp if other == "fp" else fn}, k=k, class_id=class_id)

    if by_ids:

        def factory(
            labels: ArrayLike,
            predictions_idx: ArrayLike,
            k: int | None = None,
            class_id: int | None = None,
            weights: ArrayLike | None = None,
            metrics_collections: object = None,
            updates_collections: object = None,
            name: str | None = None,
        ) -> _M:
            return state(labels, jnp.asarray(predictions_idx), k, class_id, weights)

    else:

        def factory(  # type: ignore[misc]
            labels: ArrayLike,
            predictions: ArrayLike,
            k: int,
            class_id: int | None = None,
            weights: ArrayLike | None = None,
            metrics_collections: object = None,
            updates_collections: object = None,
            name: str | None = None,
        ) -> _M:
            return state(labels, _top_k(predictions, k), int(k), class_id, weights)

    factory.__name__ = factory.__qualname__ = function_name
    factory.__doc__ = _TOP_K_DOC.format(
        summary=summary,
        name=function_name,
        ranked=_BY_IDS if by_ids else _BY_SCORES,
        state=cls.__name__,
        nan=nan,
        raises="" if by_ids else "k < 1 or k > num_classes; ",
    )
    return factory


# tf.compat.v1.metrics' top-k precision and recall: the state class, the docstring's
# summary, whether the classes come as ids (else the top k of scores), when it is NaN.
_RETRIEVED = "retrieved ids that are labels, over ids retrieved, summed over rows"
_FOUND = "labels retrieved over labels, summed over rows"
precision_at_k = _top_k_factory(
    PrecisionAtK, f"Precision of the k highest-scored classes: {_RETRIEVED}", False, "nothing was retrieved"
)
precision_at_top_k = _top_k_factory(
    PrecisionAtTopK, f"Precision of given top-k ids: {_RETRIEVED}", True, "nothing was retrieved"
)
recall_at_k = _top_k_factory(
    RecallAtK, f"Recall of the k highest-scored classes: {_FOUND}", False, "there was no label (of class_id)"
)
recall_at_top_k = _top_k_factory(
    RecallAtTopK, f"Recall of given top-k ids: {_FOUND}", True, "there was no label (of class_id)"
)


def sparse_precision_at_k(
    labels: ArrayLike,
    predictions: ArrayLike,
    k: int,
    class_id: int | None = None,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> PrecisionAtK:
    """Deprecated alias of ``precision_at_k`` (``tf.compat.v1.metrics.sparse_precision_at_k``)."""
    return precision_at_k(labels, predictions, k, class_id, weights)


class AveragePrecisionAtK(Metric):
    """State of ``average_precision_at_k``: weighted sum of per-row average precisions
    (``total``) and of their weights (``weight``), float32 scalars; static ``k``."""

    total: jax.Array
    weight: jax.Array
    k: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("average_precision_at_k")

    def compute(self) -> jax.Array:
        """``total / weight``, 0 when ``weight`` is 0 (as TF)."""
        return jnp.where(self.weight == 0, 0.0, self.total / jnp.where(self.weight == 0, 1.0, self.weight))


def average_precision_at_k(
    labels: ArrayLike,
    predictions: ArrayLike,
    k: int,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> AveragePrecisionAtK:
    """Mean over rows of the average precision of the top k classes
    (``tf.compat.v1.metrics.average_precision_at_k``).

    Per row: ``sum_i precision@i * relevant_i / min(n, k)`` over the k highest-scored
    classes, where ``relevant_i`` says whether the i-th class is a label and ``n`` counts
    the row's label ids >= 0 (ids >= num_classes first become -1). A row with ``n = 0``
    has average precision NaN, which makes the value NaN, as in TF.

    Args:
      labels: int array ``[D1, ..., DN, num_labels]`` or ``[D1, ..., DN]``.
      predictions: float scores ``[D1, ..., DN, num_classes]``.
      k: number of top classes (1 <= k <= num_classes).
      weights: None or weights broadcastable to ``[D1, ..., DN]``.

    Returns:
      An ``AveragePrecisionAtK`` state; value a float32 scalar.

    Raises:
      ValueError: k < 1 or k > num_classes; label rank does not fit; weights do not
        broadcast.
    """
    ids = _top_k(predictions, k)
    num_classes = jnp.asarray(predictions).shape[-1]
    labels = jnp.asarray(labels).astype(jnp.int32)
    labels = _expand_labels(jnp.where(labels >= num_classes, -1, labels), ids)
    relevant = jnp.any(ids[..., :, None] == labels[..., None, :], axis=-1).astype(jnp.float32)
    retrieved = jnp.arange(1, int(k) + 1, dtype=jnp.float32)
    precision_sum = jnp.sum(jnp.cumsum(relevant, axis=-1) / retrieved * relevant, axis=-1)
    num_relevant = jnp.minimum(jnp.sum(labels >= 0, axis=-1), int(k)).astype(jnp.float32)
    ap = precision_sum / num_relevant
    w = _row_weights(weights, ap)
    return AveragePrecisionAtK(total=jnp.sum(drop_padding(ap) * w), weight=jnp.sum(w), k=int(k))


def sparse_average_precision_at_k(
    labels: ArrayLike,
    predictions: ArrayLike,
    k: int,
    weights: ArrayLike | None = None,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> AveragePrecisionAtK:
    """Deprecated alias of ``average_precision_at_k``
    (``tf.compat.v1.metrics.sparse_average_precision_at_k``)."""
    return average_precision_at_k(labels, predictions, k, weights)
