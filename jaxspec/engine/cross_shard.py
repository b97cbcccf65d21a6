"""The old home of ``CrossShardOptimizer``; it lives in ``jaxspec.tpu_optimizer`` (where
TensorFlow keeps its own, ``tensorflow/python/tpu/tpu_optimizer.py``)."""

from jaxspec.tpu_optimizer import MEAN, SUM, CrossShardOptimizer

__all__ = ["MEAN", "SUM", "CrossShardOptimizer"]
