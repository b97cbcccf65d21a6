"""jaxspec: TensorFlow's Estimator spec contract on JAX.

``import jaxspec`` never imports TensorFlow; ``tf_bridge`` does, for SavedModel export.
"""

import importlib as _importlib
import sys as _sys

from jaxspec import _root_logger, export, heads, hooks, inputs, metrics, summary
from jaxspec.compilation_cache import enable_compilation_cache
from jaxspec.config.npu_config import NPURunConfig
from jaxspec.config.run_config import InputPipelineConfig, RunConfig, TPUConfig
from jaxspec.config.warm_start_settings import WarmStartSettings
from jaxspec.engine.partitioning import with_sharding_constraint
from jaxspec.errors import DataLossError, NanLossDuringTrainingError
from jaxspec.estimators.estimator import Estimator
from jaxspec.estimators.exporter import BestExporter, Exporter, FinalExporter, LatestExporter
from jaxspec.estimators.extenders import add_metrics
from jaxspec.estimators.npu_estimator import NPUEstimator
from jaxspec.estimators.tpu_estimator import TPUEstimator
from jaxspec.estimators.training import EvalSpec, TrainSpec, train_and_evaluate
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
from jaxspec.train_utils import mixed_precision
from jaxspec.train_utils.ema import ExponentialMovingAverage
from jaxspec.train_utils.loss_scale import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
    LossScaleOptimizer,
    current_loss_scale,
)
from jaxspec.train_utils.microbatch import microbatched_value_and_grad
from jaxspec.train_utils.tpu_optimizer import CrossShardOptimizer

__version__ = "0.1.0"

# The root's modules moved into config/, estimators/ and train_utils/; the import paths
# users wrote before (``jaxspec.cluster``, ``jaxspec.loss_scale``, ``from
# jaxspec.tpu_estimator import TPUEstimator``, ...) name the same module objects.
MOVED_MODULES = {
    "cluster": "jaxspec.config.cluster",
    "launchers": "jaxspec.config.launchers",
    "npu_config": "jaxspec.config.npu_config",
    "tpu_config": "jaxspec.config.tpu_config",
    "warm_start_settings": "jaxspec.config.warm_start_settings",
    "estimator": "jaxspec.estimators.estimator",
    "exporter": "jaxspec.estimators.exporter",
    "extenders": "jaxspec.estimators.extenders",
    "npu_estimator": "jaxspec.estimators.npu_estimator",
    "tpu_estimator": "jaxspec.estimators.tpu_estimator",
    "training": "jaxspec.estimators.training",
    "ema": "jaxspec.train_utils.ema",
    "learning_rate": "jaxspec.train_utils.learning_rate",
    "loss_scale": "jaxspec.train_utils.loss_scale",
    "microbatch": "jaxspec.train_utils.microbatch",
    "mixed_precision": "jaxspec.train_utils.mixed_precision",
    "tpu_optimizer": "jaxspec.train_utils.tpu_optimizer",
}
for _old, _new in MOVED_MODULES.items():
    _sys.modules[f"{__name__}.{_old}"] = globals()[_old] = _importlib.import_module(_new)
del _old, _new

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
