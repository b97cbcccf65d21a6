"""Confusion counts at thresholds and precision/recall at thresholds (tf.compat.v1.metrics),
and the counting shared with the curve metrics of ``curves.py``.

All of these keep four float32 count vectors over their thresholds (``tp``, ``fn``,
``tn``, ``fp``): a prediction counts as positive at threshold ``t`` when it is strictly
greater than ``t``, thresholds are float32, and the default thresholds and the epsilon
added around 0 and 1 are TF's, so the counts (and the values computed from them with
TF's formulas, in float32) are TensorFlow's. Predictions must lie in [0, 1]: TF checks
this when the update runs; here concrete inputs raise ValueError at once and traced ones
make the value NaN. ``metrics_collections``, ``updates_collections`` and ``name`` are
accepted for compatibility and unused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxspec.metrics._shapes import broadcast_weights, prepare
from jaxspec.metrics.base import Metric, apply_padding_mask, batch_constructor, is_concrete
from jaxspec.spec.fn_types import ArrayLike

KEPSILON = 1e-7  # TF's margin below 0 and above (or below) 1 for the end thresholds


def even_thresholds(num_thresholds: int) -> list[float]:
    """TF's inner thresholds ``(i + 1) / (num_thresholds - 1)`` for ``i < num_thresholds - 2``."""
    return [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]


def div_no_nan(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a / b``, and 0 wherever ``b == 0`` (TF's ``div_no_nan``)."""
    return jnp.where(b == 0, 0.0, a / jnp.where(b == 0, 1.0, b))


def counts_at(
    labels: ArrayLike, predictions: ArrayLike, weights: ArrayLike | None, cutoffs: Sequence[float], what: str
) -> dict[str, jax.Array]:
    """Weighted tp/fn/tn/fp per cutoff (float32 ``[len(cutoffs)]``) and ``invalid``, the
    number of real predictions outside [0, 1].

    Raises:
      ValueError: shapes differ; weights do not broadcast; concrete predictions outside
        [0, 1] (or NaN).
    """
    predictions = jnp.asarray(predictions, jnp.float32)
    labels, predictions, weights = prepare(
        jnp.asarray(labels) != 0, predictions, weights, f"{what}: labels and predictions"
    )
    real = apply_padding_mask(predictions, None)
    bad = ~((predictions >= 0.0) & (predictions <= 1.0))
    if is_concrete(predictions, real):
        b = np.asarray(bad) & (np.asarray(real) > 0)
        if b.any():
            raise ValueError(
                f"{what}: predictions must be in [0, 1], got {np.asarray(predictions)[b][:5].tolist()}."
            )
    invalid = jnp.sum(jnp.where(bad, real, 0.0))
    w = broadcast_weights(weights, predictions).reshape(-1)
    is_pos = labels.reshape(-1)
    counts = _bucket_counts(
        predictions.reshape(-1), jnp.where(is_pos, w, 0.0), jnp.where(is_pos, 0.0, w), cutoffs
    )
    return dict(counts, invalid=invalid)


def _bucket_counts(
    p: jax.Array, pos: jax.Array, neg: jax.Array, cutoffs: Sequence[float]
) -> dict[str, jax.Array]:
    """tp/fn/tn/fp at each cutoff: ``p > t`` counts as positive (float32 comparisons, as TF).

    Rather than comparing every prediction with every threshold (``[T, N]`` work, as TF
    does), each prediction goes to the bucket of how many thresholds lie strictly below
    it (a binary search over the sorted thresholds); a prediction is above threshold
    ``j`` (in sorted order) exactly when its bucket is past ``j``, so the counts are
    prefix and suffix sums of the per-bucket weights. ``O(N log T + T)``, same counts.
    """
    thresholds = np.asarray(list(cutoffs), np.float32)
    order = np.argsort(thresholds, kind="stable")
    n = len(thresholds)
    p = jnp.where(jnp.isnan(p), -jnp.inf, p)  # NaN is above no threshold, as `NaN > t` is False
    bucket = _buckets(thresholds[order], p)  # how many thresholds lie strictly below p
    pos_hist = jnp.zeros(n + 1, jnp.float32).at[bucket].add(pos)
    neg_hist = jnp.zeros(n + 1, jnp.float32).at[bucket].add(neg)
    back = np.argsort(order, kind="stable")  # sorted position of each given threshold
    pick = (lambda x: x) if np.array_equal(back, np.arange(n)) else (lambda x: x[back])  # noqa: E731

    def at_or_below(h: jax.Array) -> jax.Array:  # weight of buckets 0..j: not above sorted threshold j
        return pick(jnp.cumsum(h)[:-1])

    def above(h: jax.Array) -> jax.Array:  # weight of buckets j+1..n: above sorted threshold j
        return pick(jnp.cumsum(h[::-1])[::-1][1:])

    return dict(tp=above(pos_hist), fn=at_or_below(pos_hist), tn=at_or_below(neg_hist), fp=above(neg_hist))


def _is_tf_grid(ts: np.ndarray) -> bool:
    """Whether sorted float32 ``ts`` are TF's default cutoffs for their count: ``-1e-7``,
    ``i / (n - 1)`` for ``0 < i < n - 1`` and ``1 + 1e-7`` (at most 100,000 of them, where
    float32 resolves the spacing many times over)."""
    n = len(ts)
    if n < 3 or n > 100_000:
        return False
    grid = np.asarray([0.0 - KEPSILON] + even_thresholds(n) + [1.0 + KEPSILON], np.float32)
    return bool(np.array_equal(ts, grid))


def _buckets(ts: np.ndarray, p: jax.Array) -> jax.Array:
    """``searchsorted(ts, p, side='left')``: for each prediction, how many of the sorted
    float32 thresholds ``ts`` lie strictly below it (int32). On TF's evenly spaced grid
    the count is guessed from ``p * (n - 1)`` and corrected by comparing with the actual
    float32 thresholds next to the guess, one place each way (float rounding moves the
    guess by at most one place): the same counts as a binary search, at two comparisons
    per prediction instead of ``log2(n)`` dependent ones."""
    if not _is_tf_grid(ts):
        return jnp.searchsorted(jnp.asarray(ts), p, side="left").astype(jnp.int32)
    n = len(ts)
    table = jnp.asarray(ts)
    guess = jnp.floor(jnp.clip(p, -1.0, 2.0) * (n - 1)).astype(jnp.int32) + 1
    count = jnp.clip(guess, 0, n)
    count = count + ((count < n) & (table[jnp.minimum(count, n - 1)] < p)).astype(jnp.int32)  # one up
    return count - ((count > 0) & (table[jnp.maximum(count - 1, 0)] >= p)).astype(jnp.int32)  # one down


class ConfusionAtThresholds(Metric):
    """Weighted confusion counts per threshold (float32 ``[num_thresholds]`` each) and
    ``invalid``, the count of real predictions outside [0, 1] (the value is NaN if > 0).

    Subclasses hold their options as static fields and define ``cutoffs()``, the exact
    float thresholds the counts use, and ``compute()``.
    """

    tp: jax.Array
    fn: jax.Array
    tn: jax.Array
    fp: jax.Array
    invalid: jax.Array

    def cutoffs(self) -> tuple[float, ...]:
        """The thresholds of the counts, in order (as the Python floats TF converts)."""
        raise NotImplementedError

    def _checked(self, value: jax.Array) -> jax.Array:
        return jnp.where(self.invalid > 0, jnp.nan, value)


class _CountsAtThresholds(ConfusionAtThresholds):
    """Counts at user thresholds (kept in the given order)."""

    thresholds: tuple[float, ...] = struct.field(pytree_node=False)

    def cutoffs(self) -> tuple[float, ...]:
        return self.thresholds


class TruePositivesAtThresholds(_CountsAtThresholds):
    """State of ``true_positives_at_thresholds``; value: ``tp`` per threshold."""

    from_batch = batch_constructor("true_positives_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.tp)


class FalsePositivesAtThresholds(_CountsAtThresholds):
    """State of ``false_positives_at_thresholds``; value: ``fp`` per threshold."""

    from_batch = batch_constructor("false_positives_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.fp)


class TrueNegativesAtThresholds(_CountsAtThresholds):
    """State of ``true_negatives_at_thresholds``; value: ``tn`` per threshold."""

    from_batch = batch_constructor("true_negatives_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.tn)


class FalseNegativesAtThresholds(_CountsAtThresholds):
    """State of ``false_negatives_at_thresholds``; value: ``fn`` per threshold."""

    from_batch = batch_constructor("false_negatives_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.fn)


class PrecisionAtThresholds(_CountsAtThresholds):
    """State of ``precision_at_thresholds``; value: ``tp / (1e-7 + tp + fp)`` per threshold."""

    from_batch = batch_constructor("precision_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.tp / (KEPSILON + self.tp + self.fp))


class RecallAtThresholds(_CountsAtThresholds):
    """State of ``recall_at_thresholds``; value: ``tp / (1e-7 + tp + fn)`` per threshold."""

    from_batch = batch_constructor("recall_at_thresholds")

    def compute(self) -> jax.Array:
        return self._checked(self.tp / (KEPSILON + self.tp + self.fn))


_AT_THRESHOLDS_DOC = """{summary} at each threshold (``tf.compat.v1.metrics.{name}``).

    Args:
      labels: array of predictions' shape (a trailing size-1 axis on one side is
        squeezed), read as booleans (non-zero is positive).
      predictions: float array of values in [0, 1] (cast to float32).
      thresholds: sequence of floats, used in the given order; a prediction is positive
        at ``t`` when ``prediction > t``.
      weights: None or weights broadcastable to ``predictions`` (TF's rule).
      metrics_collections, updates_collections, name: accepted for compatibility, unused.

    Returns:
      A ``{state}`` state; value float32 ``[len(thresholds)]`` (NaN if a traced
      prediction was outside [0, 1]).

    Raises:
      ValueError: shapes differ; weights do not broadcast; concrete predictions outside
        [0, 1] (TF raises InvalidArgumentError when run).
    """


def _at_thresholds_factory(
    cls: type[_CountsAtThresholds], summary: str
) -> Callable[..., _CountsAtThresholds]:
    """The metric function of ``cls`` (its ``from_batch`` names it): TF's signature,
    the docstring of the table's row."""
    doc = cls.from_batch.__doc__ or f"``{cls.__name__}(``"  # no docstrings under python -OO
    function_name = doc.split("``")[1].split("(")[0]

    def factory(
        labels: ArrayLike,
        predictions: ArrayLike,
        thresholds: Sequence[float],
        weights: ArrayLike | None = None,
        metrics_collections: object = None,
        updates_collections: object = None,
        name: str | None = None,
    ) -> _CountsAtThresholds:
        cut = tuple(float(t) for t in np.asarray(thresholds, np.float64).reshape(-1))
        return cls(**counts_at(labels, predictions, weights, cut, function_name), thresholds=cut)

    factory.__name__ = factory.__qualname__ = function_name
    factory.__doc__ = _AT_THRESHOLDS_DOC.format(summary=summary, name=function_name, state=cls.__name__)
    return factory


# tf.compat.v1.metrics' ``*_at_thresholds``: the state class (whose ``compute`` is the
# value) and the docstring's summary, one row each.
true_positives_at_thresholds = _at_thresholds_factory(TruePositivesAtThresholds, "Weighted true positives")
false_positives_at_thresholds = _at_thresholds_factory(FalsePositivesAtThresholds, "Weighted false positives")
true_negatives_at_thresholds = _at_thresholds_factory(TrueNegativesAtThresholds, "Weighted true negatives")
false_negatives_at_thresholds = _at_thresholds_factory(FalseNegativesAtThresholds, "Weighted false negatives")
precision_at_thresholds = _at_thresholds_factory(PrecisionAtThresholds, "``tp / (1e-7 + tp + fp)``")
recall_at_thresholds = _at_thresholds_factory(RecallAtThresholds, "``tp / (1e-7 + tp + fn)``")
