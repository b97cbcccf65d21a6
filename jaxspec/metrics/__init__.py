"""Streaming eval metrics as mergeable JAX states (``tf.compat.v1.metrics``' names).

See ``jaxspec.metrics.base`` for how states stream and how padding is masked.
"""

from jaxspec.metrics.base import Metric, is_metric_state
from jaxspec.metrics.core import Mean, accuracy, mean

__all__ = ["Mean", "Metric", "accuracy", "is_metric_state", "mean"]
