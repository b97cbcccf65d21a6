"""NPURunConfig and its option objects (Ascend's ``npu_bridge.estimator.npu.npu_config``).

Every argument of the adapter's NPURunConfig is accepted with its default and checked
as the adapter checks it. The training-relevant ones act on CPU as on an NPU:
``iterations_per_loop`` (steps per ``Session.run`` loop), ``save_checkpoints_steps``
(100 when neither it nor ``save_checkpoints_secs`` is given), ``save_summary_steps``
(0: no summaries unless asked), and tf.estimator's fields. The NPU-only ones (precision,
memory, dump, profiling, compilation, HCCL, ...) are stored and, when they differ from
their defaults, logged once by the NPUEstimator as having no effect on CPU; on an
Ascend machine they go to the real adapter.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tf_bridge.runtime.run_config import RunConfig

if TYPE_CHECKING:
    import tensorflow as tf

_log = logging.getLogger("tf_bridge")

# The adapter's NPU-only arguments and defaults, in its order.
NPU_ONLY_DEFAULTS: dict[str, Any] = {
    "profiling_config": None,
    "enable_data_pre_proc": True,
    "precision_mode": None,
    "enable_reduce_precision": False,
    "variable_format_optimize": True,
    "mix_compile_mode": False,
    "hcom_parallel": False,
    "graph_memory_max_size": None,
    "variable_memory_max_size": None,
    "auto_tune_mode": None,
    "dump_config": None,
    "stream_max_parallel_num": None,
    "is_tailing_optimization": False,
    "horovod_mode": False,
    "graph_run_mode": 1,
    "op_debug_level": 0,
    "enable_scope_fusion_passes": None,
    "enable_exception_dump": 0,
    "op_select_implmode": None,
    "optypelist_for_implmode": None,
    "dynamic_input_config": None,
    "mstune_mode": None,
    "work_path": None,
    "buffer_optimize": "l2_optimize",
    "enable_small_channel": 0,
    "fusion_switch_file": None,
    "enable_compress_weight": False,
    "compress_weight_conf": None,
    "op_compiler_cache_mode": None,
    "op_compiler_cache_dir": None,
    "debug_dir": None,
    "hcom_multi_mode": False,
    "dynamic_input": False,
    "dynamic_graph_execute_mode": "dynamic_execute",
    "dynamic_inputs_shape_range": None,
    "local_rank_id": None,
    "local_device_list": None,
    "session_device_id": None,
    "distribute": None,
}
# Arguments later adapter releases added (as of the 2023 adapter), with their defaults there.
NPU_ONLY_DEFAULTS.update(
    {
        "aoe_mode": None,
        "distribute_config": None,
        "modify_mixlist": None,
        "op_precision_mode": None,
        "device_type": "default_device_type",
        "soc_config": None,
        "hccl_timeout": None,
        "op_wait_timeout": None,
        "op_execute_timeout": None,
        "HCCL_algorithm": None,
        "customize_dtypes": None,
        "op_debug_config": None,
        "memory_config": None,
        "experimental_config": None,
        "topo_sorting_mode": None,
        "aoe_config_file": None,
        "insert_op_file": None,
        "stream_sync_timeout": -1,
        "event_sync_timeout": -1,
        "external_weight": False,
        "es_cluster_config": None,
        "deterministic": 0,
        "frozen_variable": False,
        "variable_placement": "Device",
        "jit_compile": "auto",
        "precision_mode_v2": None,
        "ac_parallel_enable": None,
    }
)


class ProfilingConfig:
    """Profiling switch and options (the adapter's ``ProfilingConfig``); NPU only."""

    def __init__(self, enable_profiling: bool = False, profiling_options: str | None = None) -> None:
        self._enable_profiling = enable_profiling
        self._profiling_options = profiling_options


class DumpConfig:
    """Data dump settings (the adapter's ``DumpConfig``); NPU only."""

    def __init__(
        self,
        enable_dump: bool = False,
        dump_path: str | None = None,
        dump_step: str | None = None,
        dump_mode: str = "output",
        enable_dump_debug: bool = False,
        dump_debug_mode: str = "all",
    ) -> None:
        self._enable_dump = enable_dump
        self._dump_path = dump_path
        self._dump_step = dump_step
        self._dump_mode = dump_mode
        self._enable_dump_debug = enable_dump_debug
        self._dump_debug_mode = dump_debug_mode


class DynamicInputConfig:
    """Dynamic input shapes (the adapter's ``DynamicInputConfig``); NPU only."""

    def __init__(self, input_shape: str, dynamic_dims: str, dynamic_node_type: int) -> None:
        self._input_shape = input_shape
        self._dynamic_dims = dynamic_dims
        self._dynamic_node_type = dynamic_node_type


def _check_int(value: object, name: str, minimum: int) -> None:
    """TypeError unless an int; ValueError if below ``minimum`` (the adapter's checks)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"NPURunConfig: {name} must be an int, got {type(value).__name__}.")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"NPURunConfig: {name} must be {kind}, got {value}.")


def _check_npu_options(options: dict[str, Any], iterations_per_loop: int) -> None:
    """The adapter's checks of its own arguments.

    Raises:
      ValueError: a non-bool mix_compile_mode or horovod_mode; mix_compile_mode with
        iterations_per_loop != 1; graph_run_mode > 1; dump_config / dynamic_input_config
        of the wrong class.
      TypeError: graph_run_mode or enable_exception_dump not an int; jit_compile not a str.
    """
    if not isinstance(options["mix_compile_mode"], bool):
        raise ValueError("NPURunConfig: mix_compile_mode must be a bool.")
    if options["mix_compile_mode"] and iterations_per_loop != 1:
        raise ValueError("NPURunConfig: iterations_per_loop must be 1 when mix_compile_mode is True.")
    if not isinstance(options["horovod_mode"], bool):
        raise ValueError("NPURunConfig: horovod_mode must be a bool.")
    _check_int(options["graph_run_mode"], "graph_run_mode", 0)
    if options["graph_run_mode"] > 1:
        raise ValueError(f"NPURunConfig: graph_run_mode must be 0 or 1, got {options['graph_run_mode']}.")
    _check_int(options["enable_exception_dump"], "enable_exception_dump", 0)
    if options["dump_config"] is not None and not isinstance(options["dump_config"], DumpConfig):
        raise ValueError("NPURunConfig: dump_config must be a DumpConfig.")
    if not isinstance(options["jit_compile"], str):
        raise TypeError(
            f"NPURunConfig: jit_compile must be a str, got {type(options['jit_compile']).__name__}."
        )
    dynamic = options["dynamic_input_config"]
    if dynamic is not None and not isinstance(dynamic, DynamicInputConfig):
        raise ValueError("NPURunConfig: dynamic_input_config must be a DynamicInputConfig.")


class NPURunConfig(RunConfig):
    """RunConfig of the NPU path (Ascend's ``NPURunConfig``), same arguments and defaults.

    Args:
      iterations_per_loop: training steps per loop (one ``Session.run`` on an NPU; hooks,
        logging and checkpoints between loops); positive int, default 1.
      model_dir, tf_random_seed, save_summary_steps (default 0), save_checkpoints_steps,
        save_checkpoints_secs (neither given: every 100 steps), session_config,
        keep_checkpoint_max, keep_checkpoint_every_n_hours, log_step_count_steps,
        train_distribute, eval_distribute: as tf_bridge.RunConfig.
      **npu_options: the adapter's NPU-only arguments (``NPU_ONLY_DEFAULTS``: precision_mode,
        mix_compile_mode, dump_config, profiling_config, ... and those later releases
        added, such as aoe_mode or jit_compile); each is an attribute (its default when not
        given), and ``npu_options`` holds the ones given.

    Raises:
      TypeError: iterations_per_loop (or graph_run_mode, enable_exception_dump) is not an
        int; an argument the adapter does not have.
      ValueError: iterations_per_loop <= 0, and the adapter's other checks (see
        ``_check_npu_options``); as RunConfig.
    """

    def __init__(
        self,
        iterations_per_loop: int = 1,
        model_dir: str | None = None,
        tf_random_seed: int | None = None,
        save_summary_steps: int = 0,
        save_checkpoints_steps: int | None = None,
        save_checkpoints_secs: int | None = None,
        session_config: tf.compat.v1.ConfigProto | None = None,
        keep_checkpoint_max: int = 5,
        keep_checkpoint_every_n_hours: float = 10000,
        log_step_count_steps: int = 100,
        train_distribute: tf.distribute.Strategy | None = None,
        eval_distribute: tf.distribute.Strategy | None = None,
        **npu_options: object,
    ) -> None:
        unknown = sorted(set(npu_options) - set(NPU_ONLY_DEFAULTS))
        if unknown:
            raise TypeError(f"NPURunConfig got arguments the NPU adapter does not have: {unknown}.")
        _check_int(iterations_per_loop, "iterations_per_loop", 1)
        options = {**NPU_ONLY_DEFAULTS, **npu_options}
        _check_npu_options(options, iterations_per_loop)
        if save_checkpoints_secs is None and save_checkpoints_steps is None:
            save_checkpoints_steps = 100
        super().__init__(
            model_dir=model_dir,
            tf_random_seed=tf_random_seed,
            save_summary_steps=save_summary_steps,
            save_checkpoints_steps=save_checkpoints_steps,
            save_checkpoints_secs=save_checkpoints_secs,
            session_config=session_config,
            keep_checkpoint_max=keep_checkpoint_max,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
            log_step_count_steps=log_step_count_steps,
            train_distribute=train_distribute,
            eval_distribute=eval_distribute,
        )
        self.iterations_per_loop = iterations_per_loop
        self.npu_options = dict(npu_options)
        for name, value in options.items():
            setattr(self, name, value)

    def npu_only_settings(self) -> dict[str, object]:
        """The NPU-only arguments given, that differ from the adapter's defaults."""
        return {
            k: v
            for k, v in self.npu_options.items()
            if v is not NPU_ONLY_DEFAULTS[k] and v != NPU_ONLY_DEFAULTS[k]
        }

    def adapter_kwargs(self) -> dict[str, object]:
        """The arguments to build the adapter's own NPURunConfig from this one: the
        RunConfig fields and only the NPU options given (so an adapter release without a
        newer option still accepts them)."""
        return {
            "iterations_per_loop": self.iterations_per_loop,
            "model_dir": self.model_dir,
            "tf_random_seed": self.tf_random_seed,
            "save_summary_steps": self.save_summary_steps,
            "save_checkpoints_steps": self.save_checkpoints_steps,
            "save_checkpoints_secs": self.save_checkpoints_secs,
            "session_config": self.session_config,
            "keep_checkpoint_max": self.keep_checkpoint_max,
            "keep_checkpoint_every_n_hours": self.keep_checkpoint_every_n_hours,
            "log_step_count_steps": self.log_step_count_steps,
            "train_distribute": self.train_distribute,
            "eval_distribute": self.eval_distribute,
            **self.npu_options,
        }


__all__ = ["DumpConfig", "DynamicInputConfig", "NPURunConfig", "ProfilingConfig"]
