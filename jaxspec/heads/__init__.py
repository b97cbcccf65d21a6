"""tf.estimator's heads on JAX arrays: ``Head``, ``BinaryClassHead``, ``MultiClassHead``,
``RegressionHead``, ``MultiLabelHead``, ``MultiHead``, ``PoissonRegressionHead``, ``LogisticRegressionHead`` (also as ``jaxspec.BinaryClassHead``
...), with TF 2.15's arguments, defaults, metric keys and values, prediction keys and
export outputs, returning jaxspec specs. See ``docs/heads.md``.
"""

from jaxspec.heads.base_head import Head as Head
from jaxspec.heads.binary_class_head import BinaryClassHead as BinaryClassHead
from jaxspec.heads.multi_class_head import MultiClassHead as MultiClassHead
from jaxspec.heads.multi_head import MultiHead as MultiHead
from jaxspec.heads.multi_label_head import MultiLabelHead as MultiLabelHead
from jaxspec.heads.regression_head import LogisticRegressionHead as LogisticRegressionHead
from jaxspec.heads.regression_head import PoissonRegressionHead as PoissonRegressionHead
from jaxspec.heads.regression_head import RegressionHead as RegressionHead
from jaxspec.rules.head_args import HEAD_NAMES
from jaxspec.rules.head_keys import MetricKeys as MetricKeys
from jaxspec.rules.head_keys import PredictionKeys as PredictionKeys
from jaxspec.rules.head_keys import Reduction as Reduction

__all__ = [*HEAD_NAMES, "MetricKeys", "PredictionKeys", "Reduction"]
