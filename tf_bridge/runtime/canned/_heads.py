"""The heads the canned estimators put on their logits (tf_bridge's TF-side heads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _heads() -> Any:
    from tf_bridge.runtime import heads

    return heads


def binary_or_multi_class_head(
    n_classes: int, weight_column: Any, label_vocabulary: Sequence[str] | None, loss_reduction: str
) -> Any:
    """``BinaryClassHead`` for ``n_classes == 2``, ``MultiClassHead(n_classes)`` otherwise
    (which refuses ``n_classes`` < 2), as TF 2.15's classifiers choose."""
    heads = _heads()
    if n_classes == 2:
        return heads.BinaryClassHead(
            weight_column=weight_column, label_vocabulary=label_vocabulary, loss_reduction=loss_reduction
        )
    return heads.MultiClassHead(
        n_classes,
        weight_column=weight_column,
        label_vocabulary=label_vocabulary,
        loss_reduction=loss_reduction,
    )


def regression_head(label_dimension: int, weight_column: Any, loss_reduction: str) -> Any:
    """``RegressionHead(label_dimension)``, as TF 2.15's regressors use."""
    return _heads().RegressionHead(
        label_dimension=label_dimension, weight_column=weight_column, loss_reduction=loss_reduction
    )
