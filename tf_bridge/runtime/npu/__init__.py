"""The NPU path: Ascend's NPUEstimator API, on npu_bridge when it imports, else on CPU."""

from tf_bridge.runtime.npu.config import DumpConfig, DynamicInputConfig, NPURunConfig, ProfilingConfig
from tf_bridge.runtime.npu.estimator import NPUEstimator, load_adapter
from tf_bridge.runtime.npu.loss_scale import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
    LossScaleManager,
)
from tf_bridge.runtime.npu.optimizer import (
    NPUDistributedOptimizer,
    NPULossScaleOptimizer,
    NPUOptimizer,
    allreduce,
)

__all__ = [
    "DumpConfig",
    "DynamicInputConfig",
    "ExponentialUpdateLossScaleManager",
    "FixedLossScaleManager",
    "LossScaleManager",
    "NPUDistributedOptimizer",
    "NPUEstimator",
    "NPULossScaleOptimizer",
    "NPUOptimizer",
    "NPURunConfig",
    "ProfilingConfig",
    "allreduce",
    "load_adapter",
]
