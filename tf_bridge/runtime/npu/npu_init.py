"""Ascend's ``npu_bridge.npu_init`` namespace on tf_bridge's CPU path: what
``from npu_bridge.npu_init import *`` gives an Ascend-style script (after
``tf_bridge.install()``, where Ascend's adapter is not installed).

Everything the adapter's namespace holds that runs on one CPU process is here; the
NPU-only modules (``npu_ops``, ``npu_rnn``, ``npu_scope``, ``util``, ``keras_to_npu``,
``hccl_ops``) are not, so a script using them fails at its import, naming the module.
"""

from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from tf_bridge.runtime.npu.config import DumpConfig, DynamicInputConfig, NPURunConfig, ProfilingConfig
from tf_bridge.runtime.npu.estimator import NPUEstimator
from tf_bridge.runtime.npu.hooks import (
    NPUBroadcastGlobalVariablesHook,
    NPUCheckpointSaverHook,
    NPUOutputTensorHook,
    create_group,
    destroy_group,
    get_group_rank_from_world_rank,
    get_local_rank_id,
    get_local_rank_size,
    get_rank_id,
    get_rank_size,
    get_world_rank_from_group_rank,
    set_split_strategy_by_idx,
    set_split_strategy_by_size,
)
from tf_bridge.runtime.npu.loss_scale import ExponentialUpdateLossScaleManager, FixedLossScaleManager
from tf_bridge.runtime.npu.optimizer import NPUDistributedOptimizer, NPULossScaleOptimizer, NPUOptimizer
from tf_bridge.runtime.spec import NPUEstimatorSpec

__all__ = [
    "DumpConfig",
    "DynamicInputConfig",
    "ExponentialUpdateLossScaleManager",
    "FixedLossScaleManager",
    "NPUBroadcastGlobalVariablesHook",
    "NPUCheckpointSaverHook",
    "NPUDistributedOptimizer",
    "NPUEstimator",
    "NPUEstimatorSpec",
    "NPULossScaleOptimizer",
    "NPUOptimizer",
    "NPUOutputTensorHook",
    "NPURunConfig",
    "ProfilingConfig",
    "RewriterConfig",
    "create_group",
    "destroy_group",
    "get_group_rank_from_world_rank",
    "get_local_rank_id",
    "get_local_rank_size",
    "get_rank_id",
    "get_rank_size",
    "get_world_rank_from_group_rank",
    "rewriter_config_pb2",
    "set_split_strategy_by_idx",
    "set_split_strategy_by_size",
]
