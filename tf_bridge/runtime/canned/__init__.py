"""tf.estimator's canned estimators (TF 2.15's v2 forms) on tf_bridge, for TensorFlow >= 2.16.

``DNNClassifier``, ``DNNRegressor``, ``LinearClassifier``, ``LinearRegressor``,
``DNNLinearCombinedClassifier``, ``DNNLinearCombinedRegressor``, ``BaselineClassifier``,
``BaselineRegressor``, and the ``...Estimator`` forms taking a head of your own
(``DNNEstimator``, ``LinearEstimator``, ``DNNLinearCombinedEstimator``,
``BaselineEstimator``) take tf.estimator's
arguments and defaults, read ``tf.feature_column`` columns, train with Keras 2's legacy
optimizers (the ``tf_keras`` package: ``tf_keras.optimizers.legacy``) and name their
variables and optimizer slots as TF 2.15 did, so a model_dir written by TF 2.15's canned
estimator is evaluated, predicted from and trained further here with the same numbers.
They are ``tf_bridge.Estimator``s (train, evaluate, predict, export_saved_model, ...).
Their graphs need ``tf_keras``; importing this package does not.
"""

from tf_bridge.runtime.canned.baseline import BaselineClassifier, BaselineEstimator, BaselineRegressor
from tf_bridge.runtime.canned.dnn import DNNClassifier, DNNEstimator, DNNRegressor
from tf_bridge.runtime.canned.dnn_linear_combined import (
    DNNLinearCombinedClassifier,
    DNNLinearCombinedEstimator,
    DNNLinearCombinedRegressor,
)
from tf_bridge.runtime.canned.linear import LinearClassifier, LinearEstimator, LinearRegressor
from tf_bridge.runtime.canned.optimizers import get_optimizer_instance_v2

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
    "get_optimizer_instance_v2",
]
