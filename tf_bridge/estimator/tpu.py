"""``tf.estimator.tpu``: TPUEstimator (its CPU path) and its configs."""

from tf_bridge.runtime.run_config import InputPipelineConfig, RunConfig, TPUConfig
from tf_bridge.runtime.runner.tpu_estimator import TPUEstimator
from tf_bridge.runtime.spec import TPUEstimatorSpec

__all__ = ["InputPipelineConfig", "RunConfig", "TPUConfig", "TPUEstimator", "TPUEstimatorSpec"]
