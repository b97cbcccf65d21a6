"""The TensorFlow runner: tf.estimator's Estimator and TPUEstimator (CPU path) for TF1-style
model_fns on TensorFlow >= 2.16, where ``tf.estimator`` no longer exists."""

from tf_bridge.runner.estimator import Estimator, WarmStartSettings
from tf_bridge.runner.tpu_estimator import TPUEstimator

__all__ = ["Estimator", "TPUEstimator", "WarmStartSettings"]
