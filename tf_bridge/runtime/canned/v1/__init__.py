"""TF 2.15's v1 canned estimators (``tf.compat.v1.estimator.DNNClassifier``, ..., and the
plain names of ``tensorflow_estimator``'s canned modules), built as TF 2.15 built them:
``tf.compat.v1.train`` optimizers with TF1's slot names, variables in partitioned variable
scopes (``input_layer_partitioner`` / ``partitioner``), the v1 heads' summaries
(``average_loss``) and metrics (``tf.compat.v1.metrics.auc``'s AUCs), and
``export_savedmodel``. The ``...Estimator`` classes take a v1 head (``heads``: TF 2.15's
private ``canned.head`` factories). A model_dir written by TF 2.15's v1 class is resumed here with its
optimizer state. The v2 classes are ``tf_bridge.runtime.canned``'s."""

from tf_bridge.runtime.canned.v1.baseline import BaselineClassifier, BaselineEstimator, BaselineRegressor
from tf_bridge.runtime.canned.v1.dnn import DNNClassifier, DNNEstimator, DNNRegressor, _dnn_model_fn
from tf_bridge.runtime.canned.v1.dnn_linear_combined import (
    DNNLinearCombinedClassifier,
    DNNLinearCombinedEstimator,
    DNNLinearCombinedRegressor,
    _dnn_linear_combined_model_fn,
)
from tf_bridge.runtime.canned.v1.linear import (
    LinearClassifier,
    LinearEstimator,
    LinearRegressor,
    _compute_fraction_of_zero,
)
from tf_bridge.runtime.canned.v1.networks import dnn_logit_fn_builder, linear_logit_fn_builder

__all__ = [
    "BaselineClassifier",
    "BaselineEstimator",
    "BaselineRegressor",
    "DNNClassifier",
    "DNNEstimator",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedEstimator",
    "DNNLinearCombinedRegressor",
    "DNNRegressor",
    "LinearClassifier",
    "LinearEstimator",
    "LinearRegressor",
    "dnn_logit_fn_builder",
    "linear_logit_fn_builder",
]
# tensorflow_estimator's private model_fn names (programs called them), for its modules' plain names
_PRIVATE = (_compute_fraction_of_zero, _dnn_linear_combined_model_fn, _dnn_model_fn)
