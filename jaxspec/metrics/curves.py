"""Curve metrics: auc, sensitivity_at_specificity and specificity_at_sensitivity
(tf.compat.v1.metrics), from confusion counts at TF's thresholds (see ``thresholds.py``).

``metrics_collections``, ``updates_collections`` and ``name`` are accepted for
compatibility and unused.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import struct

from jaxspec.metrics.base import batch_constructor
from jaxspec.metrics.thresholds import KEPSILON, ConfusionAtThresholds, counts_at, div_no_nan, even_thresholds
from jaxspec.spec.fn_types import ArrayLike

_AUC_EPSILON = 1e-6  # TF's smoothing of the rates in auc
_CURVES = ("ROC", "PR")
_SUMMATIONS = ("trapezoidal", "careful_interpolation", "minoring", "majoring")


# -- auc ---------------------------------------------------------------------------------------
def _auc_cutoffs(num_thresholds: int, thresholds: Sequence[float] | None) -> tuple[int, tuple[float, ...]]:
    """TF's ``(num_thresholds, cutoffs)`` for auc: user thresholds sorted, or evenly spaced,
    between ``-1e-7`` and ``1 + 1e-7``."""
    if thresholds is not None:
        inner = sorted(float(t) for t in thresholds)
        num_thresholds = len(inner) + 2
    else:
        inner = even_thresholds(num_thresholds)
    return num_thresholds, tuple([0.0 - KEPSILON] + inner + [1.0 + KEPSILON])


def _interpolated_pr_auc(tp: jax.Array, fp: jax.Array, fn: jax.Array, n: int) -> jax.Array:
    """PR-AUC by TF's 'careful_interpolation' (Davis & Goadrich 2006): precision is
    interpolated linearly in the number of predicted positives between thresholds."""
    dtp = tp[: n - 1] - tp[1:]
    p = tp + fp
    slope = div_no_nan(dtp, jnp.maximum(p[: n - 1] - p[1:], 0.0))
    intercept = tp[1:] - slope * p[1:]
    both = (p[: n - 1] > 0) & (p[1:] > 0)
    ratio = jnp.where(both, div_no_nan(p[: n - 1], jnp.maximum(p[1:], 0.0)), jnp.ones_like(p[1:]))
    return jnp.sum(div_no_nan(slope * (dtp + intercept * jnp.log(ratio)), jnp.maximum(tp[1:] + fn[1:], 0.0)))


def auc_fromcounts_at(
    tp: jax.Array,
    fn: jax.Array,
    tn: jax.Array,
    fp: jax.Array,
    num_thresholds: int,
    curve: str = "ROC",
    summation_method: str = "trapezoidal",
) -> jax.Array:
    """Area under the ROC or PR curve from counts at TF's auc thresholds, by TF's formulas.

    Args:
      tp, fn, tn, fp: float32 ``[k]`` counts at increasing thresholds.
      num_thresholds: TF's ``num_thresholds`` (the number of rates summed over).
      curve: 'ROC' or 'PR'.
      summation_method: 'trapezoidal', 'careful_interpolation' (PR only; ROC uses the
        trapezoidal rule), 'minoring' or 'majoring'.

    Returns:
      float32 scalar.

    Raises:
      ValueError: unknown curve or summation_method.
    """
    _check_auc_options(curve, summation_method)
    n = num_thresholds
    if curve == "PR" and summation_method == "careful_interpolation":
        return _interpolated_pr_auc(tp, fp, fn, n)
    rec = (tp + _AUC_EPSILON) / (tp + fn + _AUC_EPSILON)
    if curve == "ROC":
        x, y = fp / (fp + tn + _AUC_EPSILON), rec
    else:
        x, y = rec, (tp + _AUC_EPSILON) / (tp + fp + _AUC_EPSILON)
    dx = x[: n - 1] - x[1:]
    if summation_method == "minoring":
        height = jnp.minimum(y[: n - 1], y[1:])
    elif summation_method == "majoring":
        height = jnp.maximum(y[: n - 1], y[1:])
    else:
        height = (y[: n - 1] + y[1:]) / 2.0
    return jnp.sum(dx * height)


def _check_auc_options(curve: str, summation_method: str) -> None:
    if curve not in _CURVES:
        raise ValueError(f"auc: curve must be 'ROC' or 'PR', got {curve!r}.")
    if summation_method not in _SUMMATIONS:
        raise ValueError(
            f"auc: summation_method must be one of {', '.join(map(repr, _SUMMATIONS))}, "
            f"got {summation_method!r}."
        )


class AUC(ConfusionAtThresholds):
    """State of ``auc``: counts at TF's auc thresholds plus the static options."""

    num_thresholds: int = struct.field(pytree_node=False)
    curve: str = struct.field(pytree_node=False)
    summation_method: str = struct.field(pytree_node=False)
    thresholds: tuple[float, ...] | None = struct.field(pytree_node=False)

    from_batch = batch_constructor("auc")

    def cutoffs(self) -> tuple[float, ...]:
        return _auc_cutoffs(self.num_thresholds, self.thresholds)[1]

    def compute(self) -> jax.Array:
        n = _auc_cutoffs(self.num_thresholds, self.thresholds)[0]
        return self._checked(
            auc_fromcounts_at(self.tp, self.fn, self.tn, self.fp, n, self.curve, self.summation_method)
        )


def auc(
    labels: ArrayLike,
    predictions: ArrayLike,
    weights: ArrayLike | None = None,
    num_thresholds: int = 200,
    metrics_collections: object = None,
    updates_collections: object = None,
    curve: str = "ROC",
    name: str | None = None,
    summation_method: str = "trapezoidal",
    thresholds: Sequence[float] | None = None,
) -> AUC:
    """Area under the ROC or PR curve, Riemann-summed over thresholds
    (``tf.compat.v1.metrics.auc``, same thresholds and formulas, so TF's value rather
    than the exact area).

    Thresholds: ``-1e-7``, then ``(i + 1) / (num_thresholds - 1)`` for
    ``i < num_thresholds - 2`` (or the given ``thresholds``, sorted), then ``1 + 1e-7``.
    Rates are smoothed with 1e-6 as TF does. PR with 'trapezoidal' is TF's default and
    known to overestimate; 'careful_interpolation' is the better PR estimate.

    Args:
      labels: array of predictions' shape, read as booleans (non-zero is positive).
      predictions: float array of values in [0, 1].
      weights: None or weights broadcastable to ``predictions`` (TF's rule).
      num_thresholds: number of thresholds when ``thresholds`` is None.
      curve: 'ROC' or 'PR'.
      summation_method: 'trapezoidal', 'careful_interpolation', 'minoring' or 'majoring'.
      thresholds: optional inner thresholds (then ``num_thresholds`` is ignored).

    Returns:
      An ``AUC`` state; value a float32 scalar (NaN if a traced prediction was outside
      [0, 1]).

    Raises:
      ValueError: unknown curve or summation_method; shapes differ; weights do not
        broadcast; concrete predictions outside [0, 1] (TF raises InvalidArgumentError
        when run).
    """
    _check_auc_options(curve, summation_method)
    user = None if thresholds is None else tuple(sorted(float(t) for t in thresholds))
    _, cut = _auc_cutoffs(int(num_thresholds), user)
    return AUC(
        **counts_at(labels, predictions, weights, cut, "auc"),
        num_thresholds=int(num_thresholds),
        curve=curve,
        summation_method=summation_method,
        thresholds=user,
    )


# -- sensitivity / specificity -------------------------------------------------------------
class SensitivityAtSpecificity(ConfusionAtThresholds):
    """State of ``sensitivity_at_specificity`` (static ``specificity``, ``num_thresholds``)."""

    specificity: float = struct.field(pytree_node=False)
    num_thresholds: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("sensitivity_at_specificity")

    def cutoffs(self) -> tuple[float, ...]:
        return tuple([0.0 - KEPSILON] + even_thresholds(self.num_thresholds) + [1.0 + KEPSILON])

    def compute(self) -> jax.Array:
        """Recall at the first threshold whose specificity is closest to the target."""
        spec = self.tn / (self.tn + self.fp + KEPSILON)
        i = jnp.argmin(jnp.abs(spec - self.specificity))
        return self._checked(self.tp[i] / (self.tp[i] + self.fn[i] + KEPSILON))


class SpecificityAtSensitivity(ConfusionAtThresholds):
    """State of ``specificity_at_sensitivity`` (static ``sensitivity``, ``num_thresholds``)."""

    sensitivity: float = struct.field(pytree_node=False)
    num_thresholds: int = struct.field(pytree_node=False)

    from_batch = batch_constructor("specificity_at_sensitivity")

    def cutoffs(self) -> tuple[float, ...]:
        # TF ends these thresholds just *below* 1 (sensitivity_at_specificity: above).
        return tuple([0.0 - KEPSILON] + even_thresholds(self.num_thresholds) + [1.0 - KEPSILON])

    def compute(self) -> jax.Array:
        """Specificity at the *last* threshold whose sensitivity is closest to the target."""
        dist = jnp.abs(self.tp / (self.tp + self.fn + KEPSILON) - self.sensitivity)
        last = dist.shape[0] - 1 - jnp.argmax((dist == jnp.min(dist))[::-1])
        return self._checked(self.tn[last] / (self.tn[last] + self.fp[last] + KEPSILON))


def _check_rate(value: float, what: str) -> float:
    if value < 0 or value > 1:
        raise ValueError(f"{what} must be in [0, 1], got {value}.")
    return float(value)


def sensitivity_at_specificity(
    labels: ArrayLike,
    predictions: ArrayLike,
    specificity: float,
    weights: ArrayLike | None = None,
    num_thresholds: int = 200,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> SensitivityAtSpecificity:
    """Sensitivity (recall) at the threshold whose specificity is closest to
    ``specificity`` (``tf.compat.v1.metrics.sensitivity_at_specificity``).

    Thresholds: ``-1e-7``, ``(i + 1) / (num_thresholds - 1)`` for ``i < num_thresholds -
    2``, ``1 + 1e-7``; on ties the first (lowest) threshold wins, as TF's argmin. Rates
    use TF's 1e-7 smoothing.

    Args:
      labels: array of predictions' shape, read as booleans.
      predictions: float array of values in [0, 1].
      specificity: target in [0, 1] (a Python float).
      weights: None or weights broadcastable to ``predictions``.
      num_thresholds: number of thresholds.

    Returns:
      A ``SensitivityAtSpecificity`` state; value a float32 scalar.

    Raises:
      ValueError: ``specificity`` outside [0, 1]; shapes differ; weights do not
        broadcast; concrete predictions outside [0, 1].
    """
    specificity = _check_rate(specificity, "sensitivity_at_specificity: specificity")
    state = SensitivityAtSpecificity(
        tp=jnp.zeros(0),
        fn=jnp.zeros(0),
        tn=jnp.zeros(0),
        fp=jnp.zeros(0),
        invalid=jnp.zeros(()),
        specificity=specificity,
        num_thresholds=int(num_thresholds),
    )
    return state.replace(
        **counts_at(labels, predictions, weights, state.cutoffs(), "sensitivity_at_specificity")
    )


def specificity_at_sensitivity(
    labels: ArrayLike,
    predictions: ArrayLike,
    sensitivity: float,
    weights: ArrayLike | None = None,
    num_thresholds: int = 200,
    metrics_collections: object = None,
    updates_collections: object = None,
    name: str | None = None,
) -> SpecificityAtSensitivity:
    """Specificity at the threshold whose sensitivity is closest to ``sensitivity``
    (``tf.compat.v1.metrics.specificity_at_sensitivity``).

    Thresholds as TF's: ``-1e-7``, ``(i + 1) / (num_thresholds - 1)``, and ``1 - 1e-7``
    (below 1, unlike sensitivity_at_specificity, so a prediction of exactly 1 is positive
    at every threshold). On ties the *last* (highest) threshold wins, as TF.

    Args:
      labels: array of predictions' shape, read as booleans.
      predictions: float array of values in [0, 1].
      sensitivity: target in [0, 1] (a Python float).
      weights: None or weights broadcastable to ``predictions``.
      num_thresholds: number of thresholds.

    Returns:
      A ``SpecificityAtSensitivity`` state; value a float32 scalar.

    Raises:
      ValueError: ``sensitivity`` outside [0, 1]; shapes differ; weights do not
        broadcast; concrete predictions outside [0, 1].
    """
    sensitivity = _check_rate(sensitivity, "specificity_at_sensitivity: sensitivity")
    state = SpecificityAtSensitivity(
        tp=jnp.zeros(0),
        fn=jnp.zeros(0),
        tn=jnp.zeros(0),
        fp=jnp.zeros(0),
        invalid=jnp.zeros(()),
        sensitivity=sensitivity,
        num_thresholds=int(num_thresholds),
    )
    return state.replace(
        **counts_at(labels, predictions, weights, state.cutoffs(), "specificity_at_sensitivity")
    )
