"""jaxspec: TensorFlow's Estimator spec contract on JAX.

``import jaxspec`` never imports TensorFlow; ``tf_bridge`` does, for SavedModel export.
"""

from jaxspec import _root_logger, export, heads, hooks, inputs, metrics, mixed_precision, summary
from jaxspec.compilation_cache import enable_compilation_cache
from jaxspec.config import InputPipelineConfig, RunConfig, TPUConfig
from jaxspec.ema import ExponentialMovingAverage
from jaxspec.engine.partitioning import with_sharding_constraint
from jaxspec.errors import DataLossError, NanLossDuringTrainingError
from jaxspec.estimator import Estimator
from jaxspec.exporter import BestExporter, Exporter, FinalExporter, LatestExporter
from jaxspec.extenders import add_metrics
from jaxspec.heads import BinaryClassHead, Head, MultiClassHead, MultiHead, MultiLabelHead, RegressionHead
from jaxspec.hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    FeedFnHook,
    FinalOpsHook,
    LoggingTensorHook,
    NanTensorHook,
    ProfilerHook,
    SecondOrStepTimer,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from jaxspec.loop.console import undo_basic_config
from jaxspec.loss_scale import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
    LossScaleOptimizer,
    current_loss_scale,
)
from jaxspec.microbatch import microbatched_value_and_grad
from jaxspec.mode_keys import ModeKeys
from jaxspec.npu_config import NPURunConfig
from jaxspec.npu_estimator import NPUEstimator
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
from jaxspec.tpu_optimizer import CrossShardOptimizer
from jaxspec.training import EvalSpec, TrainSpec, train_and_evaluate
from jaxspec.warm_start_settings import WarmStartSettings

__version__ = "0.1.0"

undo_basic_config(_root_logger.HANDLERS_BEFORE_IMPORT)
del undo_basic_config

__all__ = [
    "enable_compilation_cache",
    "BestExporter",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "EvalSpec",
    "Exporter",
    "FeedFnHook",
    "FinalExporter",
    "FinalOpsHook",
    "LatestExporter",
    "LoggingTensorHook",
    "NanTensorHook",
    "ProfilerHook",
    "SecondOrStepTimer",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
    "TrainSpec",
    "WarmStartSettings",
    "hooks",
    "summary",
    "train_and_evaluate",
    "CrossShardOptimizer",
    "DataLossError",
    "Estimator",
    "EstimatorSpec",
    "InputPipelineConfig",
    "ModeKeys",
    "NPUEstimator",
    "NPUEstimatorSpec",
    "NPURunConfig",
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
    "with_sharding_constraint",
    "heads",
    "Head",
    "BinaryClassHead",
    "MultiClassHead",
    "MultiHead",
    "MultiLabelHead",
    "RegressionHead",
    "microbatched_value_and_grad",
    "FixedLossScaleManager",
    "ExponentialUpdateLossScaleManager",
    "LossScaleOptimizer",
    "current_loss_scale",
    "mixed_precision",
    "ExponentialMovingAverage",
    "add_metrics",
    "inputs",
]
