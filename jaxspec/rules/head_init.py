"""The constructors of tf.estimator's heads, once for both sides: each class takes a
head's arguments with TF 2.15's names and defaults, checks them (``head_args``) and keeps
them. A concrete head puts it first among its bases (``class MultiClassHead(
MultiClassHeadArgs, Head)``); its side gives the losses, metrics and specs.

Args common to the heads (as tf.estimator): ``weight_column`` (None, a features key, or
in tf_bridge a ``tf.feature_column.numeric_column``), ``loss_reduction`` (a
``Reduction`` value but NONE; default SUM_OVER_BATCH_SIZE), ``loss_fn`` (``(labels,
logits[, features]) -> unweighted losses``, replacing the head's loss) and ``name`` (the
metric key suffix; required inside a MultiHead).

Raises (every constructor): ValueError for a bad argument, naming it (as TF).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jaxspec.rules.head_args import (
    HeadArgs,
    check_label_dimension,
    check_multi_head_args,
    check_n_classes,
    class_ids_for_metrics,
    common_loss_reduction,
)
from jaxspec.rules.head_keys import Reduction

_SOBS = Reduction.SUM_OVER_BATCH_SIZE


class BinaryClassHeadArgs(HeadArgs):
    """``BinaryClassHead``'s arguments: one logit; ``thresholds`` in (0, 1) for the
    threshold metrics; ``label_vocabulary`` a list/tuple of the two class strings."""

    def __init__(
        self,
        weight_column: object = None,
        thresholds: Sequence[float] | None = None,
        label_vocabulary: Sequence[str] | None = None,
        loss_reduction: str = _SOBS,
        loss_fn: Callable[..., Any] | None = None,
        name: str | None = None,
    ) -> None:
        self._set_head_args(
            1,
            weight_column,
            loss_reduction,
            loss_fn,
            name,
            label_vocabulary=label_vocabulary,
            thresholds=thresholds,
        )


class MultiClassHeadArgs(HeadArgs):
    """``MultiClassHead``'s arguments: ``n_classes`` > 2 logits; ``label_vocabulary`` a
    list/tuple of ``n_classes`` class strings."""

    def __init__(
        self,
        n_classes: int,
        weight_column: object = None,
        label_vocabulary: Sequence[str] | None = None,
        loss_reduction: str = _SOBS,
        loss_fn: Callable[..., Any] | None = None,
        name: str | None = None,
    ) -> None:
        self._n_classes = check_n_classes(n_classes, 3, "MultiClassHead")
        self._set_head_args(
            n_classes,
            weight_column,
            loss_reduction,
            loss_fn,
            name,
            label_vocabulary=label_vocabulary,
            n_classes=n_classes,
        )


class MultiLabelHeadArgs(HeadArgs):
    """``MultiLabelHead``'s arguments: ``n_classes`` > 1 logits; ``thresholds`` in (0, 1);
    ``label_vocabulary`` of ``n_classes`` strings; ``classes_for_class_based_metrics``
    class ids or (with a vocabulary) names, kept as ids."""

    def __init__(
        self,
        n_classes: int,
        weight_column: object = None,
        thresholds: Sequence[float] | None = None,
        label_vocabulary: Sequence[str] | None = None,
        loss_reduction: str = _SOBS,
        loss_fn: Callable[..., Any] | None = None,
        classes_for_class_based_metrics: Sequence[int] | Sequence[str] | None = None,
        name: str | None = None,
    ) -> None:
        self._n_classes = check_n_classes(n_classes, 2, "MultiLabelHead")
        more = dict(label_vocabulary=label_vocabulary, n_classes=n_classes, thresholds=thresholds)
        self._set_head_args(n_classes, weight_column, loss_reduction, loss_fn, name, **more)
        self._classes = class_ids_for_metrics(classes_for_class_based_metrics, n_classes, label_vocabulary)


class RegressionHeadArgs(HeadArgs):
    """``RegressionHead``'s arguments: ``label_dimension`` >= 1 logits;
    ``inverse_link_fn`` (logits -> predictions, default identity)."""

    def __init__(
        self,
        label_dimension: int = 1,
        weight_column: object = None,
        loss_reduction: str = _SOBS,
        loss_fn: Callable[..., Any] | None = None,
        inverse_link_fn: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> None:
        self._set_head_args(
            check_label_dimension(label_dimension), weight_column, loss_reduction, loss_fn, name
        )
        self._inverse_link_fn = inverse_link_fn


class PoissonRegressionHeadArgs(RegressionHeadArgs):
    """``PoissonRegressionHead``'s arguments (``compute_full_loss``: add Stirling's term,
    default True). The head gives ``_poisson_loss(labels, logits)`` and ``_exp``."""

    _poisson_loss: Callable[..., Any]
    _exp: Callable[[Any], Any]

    def __init__(
        self,
        label_dimension: int = 1,
        weight_column: object = None,
        loss_reduction: str = _SOBS,
        compute_full_loss: bool = True,
        name: str | None = None,
    ) -> None:
        self._compute_full_loss = compute_full_loss
        super().__init__(label_dimension, weight_column, loss_reduction, self._poisson_loss, self._exp, name)


class LogisticRegressionHeadArgs(RegressionHeadArgs):
    """``LogisticRegressionHead``'s arguments (label_dimension is 1). The head gives
    ``_logistic_loss(labels, logits)`` and ``_sigmoid``."""

    _logistic_loss: Callable[..., Any]
    _sigmoid: Callable[[Any], Any]

    def __init__(
        self, weight_column: object = None, loss_reduction: str = _SOBS, name: str | None = None
    ) -> None:
        super().__init__(1, weight_column, loss_reduction, self._logistic_loss, self._sigmoid, name)


class MultiHeadArgs:
    """``MultiHead``'s arguments (``heads``: named heads; ``head_weights``: one float per
    head, or None for all 1), the properties that follow from them, and the rule for its
    logits and labels (``_logits_dict``; the head gives ``_split_logits``)."""

    _split_logits: Callable[[Any], dict[str, Any]]

    def __init__(self, heads: Sequence[Any], head_weights: Sequence[float] | None = None) -> None:
        self._head_weights = check_multi_head_args(heads, head_weights)
        self._heads = tuple(heads)

    @property
    def name(self) -> str:
        """The heads' names joined by ``_``."""
        return "_".join(h.name for h in self._heads)

    @property
    def logits_dimension(self) -> int:
        """The sum of the heads' logits dimensions."""
        return sum(h.logits_dimension for h in self._heads)

    @property
    def loss_reduction(self) -> str:
        """The heads' common loss reduction (ValueError if they differ)."""
        return common_loss_reduction(self._heads)

    def _logits_dict(self, logits: Any, labels: Any = None) -> dict[str, Any]:
        """The logits by head name: a dict of them as given, or one array split on its
        last axis in head order (``_split_logits``); labels, when given, a dict by head
        name.

        Raises:
          ValueError: a head missing from the logits or the labels dict, or labels that
            are not a dict (both name the heads).
        """
        names = [h.name for h in self._heads]
        if isinstance(logits, dict):
            missing = [n for n in names if n not in logits]
            if missing:
                raise ValueError(f"logits is a dict without the head(s) {missing} (it has {sorted(logits)}).")
            logits_dict = logits
        else:
            logits_dict = self._split_logits(logits)
        if labels is not None:
            if not isinstance(labels, dict):
                raise ValueError(
                    f"labels of a MultiHead must be a dict of head name to labels, got {type(labels).__name__}."
                )
            missing = [n for n in names if n not in labels]
            if missing:
                raise ValueError(f"labels has no entry for the head(s) {missing} (it has {sorted(labels)}).")
        return logits_dict
