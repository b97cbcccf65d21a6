"""TF 2.15's v1 canned estimators (``tf.compat.v1.estimator.DNNClassifier``, ..., and the
plain names of ``tensorflow_estimator``'s canned modules): the v2 classes with
``export_savedmodel`` and the v1 default ``loss_reduction=SUM``
(``tf_bridge.runtime.runner.v1_forms``). One line per class."""

from tf_bridge.runtime.canned import baseline, dnn, dnn_linear_combined, linear
from tf_bridge.runtime.runner.v1_forms import v1_form

BaselineClassifier = v1_form(baseline.BaselineClassifier)
BaselineEstimator = v1_form(baseline.BaselineEstimator)
BaselineRegressor = v1_form(baseline.BaselineRegressor)
DNNClassifier = v1_form(dnn.DNNClassifier)
DNNRegressor = v1_form(dnn.DNNRegressor)
LinearClassifier = v1_form(linear.LinearClassifier)
LinearRegressor = v1_form(linear.LinearRegressor)
DNNLinearCombinedClassifier = v1_form(dnn_linear_combined.DNNLinearCombinedClassifier)
DNNLinearCombinedRegressor = v1_form(dnn_linear_combined.DNNLinearCombinedRegressor)

__all__ = [
    "BaselineClassifier",
    "BaselineEstimator",
    "BaselineRegressor",
    "DNNClassifier",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedRegressor",
    "DNNRegressor",
    "LinearClassifier",
    "LinearRegressor",
]
