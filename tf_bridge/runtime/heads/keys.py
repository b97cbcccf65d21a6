"""The names tf.estimator's heads give their outputs: eval metric keys, prediction keys and
the serving signature keys (``tensorflow_estimator``'s ``canned.metric_keys.MetricKeys``,
``canned.prediction_keys.PredictionKeys`` and ``head.base_head``'s serving keys).

The same strings on both sides: they are defined once, TF-free, in ``jaxspec.heads.keys``
(tf_bridge imports jaxspec, never the reverse).
"""

from __future__ import annotations

from jaxspec.heads.keys import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    REGRESS_SERVING_KEY,
    MetricKeys,
    PredictionKeys,
    Reduction,
)

__all__ = [
    "CLASSIFY_SERVING_KEY",
    "DEFAULT_SERVING_KEY",
    "PREDICT_SERVING_KEY",
    "REGRESS_SERVING_KEY",
    "MetricKeys",
    "PredictionKeys",
    "Reduction",
]
