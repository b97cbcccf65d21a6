"""tf.estimator's heads on JAX arrays: ``Head``, ``BinaryClassHead``, ``MultiClassHead``,
``RegressionHead``, ``MultiLabelHead``, ``MultiHead``, ``PoissonRegressionHead``, ``LogisticRegressionHead`` (also as ``jaxspec.BinaryClassHead``
...), with TF 2.15's arguments, defaults, metric keys and values, prediction keys and
export outputs, returning jaxspec specs. See ``docs/heads.md``.
"""

from jaxspec.heads.base_head import Head
from jaxspec.heads.binary_class_head import BinaryClassHead
from jaxspec.heads.multi_class_head import MultiClassHead
from jaxspec.heads.multi_head import MultiHead
from jaxspec.heads.multi_label_head import MultiLabelHead
from jaxspec.heads.regression_head import LogisticRegressionHead, PoissonRegressionHead, RegressionHead
from jaxspec.rules.head_keys import MetricKeys, PredictionKeys, Reduction

__all__ = [
    "BinaryClassHead",
    "Head",
    "LogisticRegressionHead",
    "MetricKeys",
    "MultiClassHead",
    "MultiHead",
    "MultiLabelHead",
    "PoissonRegressionHead",
    "PredictionKeys",
    "Reduction",
    "RegressionHead",
]
