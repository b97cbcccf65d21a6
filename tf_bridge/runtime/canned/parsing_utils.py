"""``tf.estimator.classifier_parse_example_spec`` and ``regressor_parse_example_spec``: the
``tf.io.parse_example`` spec of a canned estimator's training input (its feature columns,
the label, the weight column), as TF 2.15's (v2 forms) built it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf


def _with_label_and_weight(
    spec: dict[str, Any], label_key: str, label_spec: Any, weight_column: Any
) -> dict[str, Any]:
    if label_key in spec:
        raise ValueError(
            f"label_key {label_key!r} is also a feature of the feature columns ({sorted(spec)}); "
            "the label cannot be a feature."
        )
    spec[label_key] = label_spec
    if weight_column is None:
        return spec
    if isinstance(weight_column, str):
        weight_column = tf.feature_column.numeric_column(weight_column)
    numeric = type(tf.feature_column.numeric_column("_"))
    if not isinstance(weight_column, numeric):
        raise ValueError(
            "weight_column has to be a str or a tf.feature_column.numeric_column; "
            f"got {type(weight_column).__name__}: {weight_column!r}."
        )
    if weight_column.key in spec:
        raise ValueError(
            f"weight_column {weight_column.key!r} is also a feature or the label ({sorted(spec)})."
        )
    spec.update(weight_column.parse_example_spec)
    return spec


def classifier_parse_example_spec(
    feature_columns: Iterable[Any],
    label_key: str,
    label_dtype: tf.DType = tf.int64,
    label_default: Any = None,
    weight_column: Any = None,
) -> dict[str, Any]:
    """The parsing spec for a classifier's ``tf.Example`` input: the feature columns'
    ``make_parse_example_spec``, the label as ``FixedLenFeature([1], label_dtype,
    label_default)`` under ``label_key`` and the weight column's feature (a str names a
    float ``numeric_column``), as ``tf.estimator.classifier_parse_example_spec`` (TF 2.15).

    Raises:
      ValueError: ``label_key`` or the weight column's key is also a feature; a
        weight_column that is neither a str nor a numeric_column.
    """
    spec = tf.feature_column.make_parse_example_spec(list(feature_columns))
    label = tf.io.FixedLenFeature((1,), label_dtype, label_default)
    return _with_label_and_weight(spec, label_key, label, weight_column)


def regressor_parse_example_spec(
    feature_columns: Iterable[Any],
    label_key: str,
    label_dtype: tf.DType = tf.float32,
    label_default: Any = None,
    label_dimension: int = 1,
    weight_column: Any = None,
) -> dict[str, Any]:
    """As ``classifier_parse_example_spec``, for a regressor: the label is
    ``FixedLenFeature([label_dimension], label_dtype, label_default)`` (float32 by default),
    as ``tf.estimator.regressor_parse_example_spec`` (TF 2.15).

    Raises:
      ValueError: as ``classifier_parse_example_spec``.
    """
    spec = tf.feature_column.make_parse_example_spec(list(feature_columns))
    label = tf.io.FixedLenFeature((label_dimension,), label_dtype, label_default)
    return _with_label_and_weight(spec, label_key, label, weight_column)


__all__ = ["classifier_parse_example_spec", "regressor_parse_example_spec"]
