"""tf.estimator's heads on TensorFlow >= 2.16 (``tf.estimator.BinaryClassHead``, ... in
TF <= 2.15): a head turns a model's logits and labels into the spec its model_fn returns,
with tf.estimator's losses, eval metric keys and values, prediction keys, export outputs
and signature defs, and its exception types for bad input.

    head = tf_bridge.runtime.heads.MultiClassHead(n_classes=3)

    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable("w", [4, head.logits_dimension])
        logits = tf.matmul(features["x"], w)
        return head.create_estimator_spec(features, mode, logits, labels, train_op_fn=...)

``create_estimator_spec`` returns a ``tf_bridge.EstimatorSpec`` for ``tf_bridge.Estimator``
(graph mode); ``loss`` and ``predictions`` also work eagerly. Eval metrics are tf_keras
(Keras 2) metrics, as TF 2.15's heads used. The same names are in ``tf_bridge.estimator``.
"""

from jaxspec.rules.head_args import HEAD_NAMES
from jaxspec.rules.head_keys import MetricKeys as MetricKeys
from jaxspec.rules.head_keys import PredictionKeys as PredictionKeys
from tf_bridge.runtime.heads.base import Head as Head
from tf_bridge.runtime.heads.binary_class import BinaryClassHead as BinaryClassHead
from tf_bridge.runtime.heads.multi_class import MultiClassHead as MultiClassHead
from tf_bridge.runtime.heads.multi_head import MultiHead as MultiHead
from tf_bridge.runtime.heads.multi_label import MultiLabelHead as MultiLabelHead
from tf_bridge.runtime.heads.regression import LogisticRegressionHead as LogisticRegressionHead
from tf_bridge.runtime.heads.regression import PoissonRegressionHead as PoissonRegressionHead
from tf_bridge.runtime.heads.regression import RegressionHead as RegressionHead

__all__ = [*HEAD_NAMES, "MetricKeys", "PredictionKeys"]
