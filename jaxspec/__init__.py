"""jaxspec: TensorFlow's Estimator spec contract on JAX.

``import jaxspec`` never imports TensorFlow; ``tf_bridge`` does, for SavedModel export.
"""

from jaxspec import export, metrics
from jaxspec.config import InputPipelineConfig, RunConfig, TPUConfig
from jaxspec.engine.cross_shard import CrossShardOptimizer
from jaxspec.estimator import Estimator
from jaxspec.loop.train import NanLossDuringTrainingError
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec import (
    EstimatorSpec,
    NPUEstimatorSpec,
    Scaffold,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    TPUEstimatorSpec,
)
from jaxspec.tpu_estimator import TPUEstimator

__version__ = "0.1.0"

__all__ = [
    "CrossShardOptimizer",
    "Estimator",
    "EstimatorSpec",
    "InputPipelineConfig",
    "ModeKeys",
    "NPUEstimatorSpec",
    "NanLossDuringTrainingError",
    "RunConfig",
    "Scaffold",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "TPUConfig",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "export",
    "metrics",
]
