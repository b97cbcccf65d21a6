"""``tf.estimator.tpu``: TPUEstimator (its CPU path) and its configs."""

from tf_bridge.run_config import InputPipelineConfig, RunConfig, TPUConfig
from tf_bridge.runner.tpu_estimator import TPUEstimator
from tf_bridge.spec import TPUEstimatorSpec

__all__ = ["InputPipelineConfig", "RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec"]
