"""Ascend's ``npu_bridge.npu_init`` namespace on tf_bridge's CPU path: what
``from npu_bridge.npu_init import *`` gives an Ascend-style script (after
``tf_bridge.install()``, where Ascend's adapter is not installed).

Everything the adapter's namespace holds that runs on one CPU process is here, with the
modules it imports: ``npu_ops``, ``npu_scope``, ``npu_unary_ops`` and ``hccl_ops`` (their CPU
forms, ``tf_bridge.runtime.npu.*``). The NPU-only modules (``npu_rnn``, ``util``,
``keras_to_npu``, ``npu_strategy``) are stand-ins: the star-import works, and calling any of
their functions raises NotImplementedError naming it.
"""

from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from tf_bridge.runtime.npu import hccl_ops, npu_ops, npu_scope, npu_unary_ops
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
from tf_bridge.runtime.npu.npu_only import NpuOnlyModule
from tf_bridge.runtime.npu.optimizer import NPUDistributedOptimizer, NPULossScaleOptimizer, NPUOptimizer
from tf_bridge.runtime.spec import NPUEstimatorSpec

npu_rnn = NpuOnlyModule("npu_rnn", "the NPU's fused RNN kernels")
util = NpuOnlyModule("util", "the NPU's loop and graph-engine utilities")
keras_to_npu = NpuOnlyModule("keras_to_npu", "Keras models compiled for the NPU")
npu_strategy = NpuOnlyModule("npu_strategy", "HCCL's distribution strategy")

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
    "hccl_ops",
    "keras_to_npu",
    "npu_ops",
    "npu_rnn",
    "npu_scope",
    "npu_strategy",
    "npu_unary_ops",
    "rewriter_config_pb2",
    "set_split_strategy_by_idx",
    "set_split_strategy_by_size",
    "util",
]
