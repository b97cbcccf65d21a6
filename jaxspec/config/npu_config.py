"""NPURunConfig: Ascend's ``npu_bridge.estimator.npu.npu_config.NPURunConfig`` for
``jaxspec.NPUEstimator``.

The adapter's training-relevant fields keep their names, defaults and validation. The
Ascend graph-engine options (profiling, dump, fusion, compiler caches, HCCL, ...) are
accepted as keyword arguments and kept in ``npu_options``; they mean nothing to XLA.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from jaxspec._checks import check_nonnegative_int, check_positive_int, type_name
from jaxspec.config.run_config import RunConfig

_log = logging.getLogger("jaxspec")

#: precision_mode values of the adapter that map onto a JAX compute dtype.
PRECISION_DTYPES = {
    "force_fp32": "float32",
    "must_keep_origin_dtype": "float32",
    "force_fp16": "float16",
    "allow_fp32_to_fp16": "float16",
    "allow_mix_precision": "float16",
    "allow_mix_precision_fp16": "float16",
    "allow_fp32_to_bf16": "bfloat16",
    "allow_mix_precision_bf16": "bfloat16",
}
#: precision_mode values the adapter knows that have no JAX counterpart (recorded, ignored).
UNMAPPED_PRECISION_MODES = ("cube_fp16in_fp32out", "force_lowerprecision", "allow_mix_precision_fp32")


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"NPURunConfig: {name} must be a bool, got {type_name(value)} ({value!r}).")
    return value


def _check_npu_fields(
    iterations_per_loop: Any,
    mix_compile_mode: Any,
    horovod_mode: Any,
    graph_run_mode: Any,
    enable_exception_dump: Any,
    precision_mode: Any,
) -> None:
    """The adapter's checks of NPURunConfig's own fields (see NPURunConfig's Raises)."""
    check_positive_int(iterations_per_loop, "NPURunConfig.iterations_per_loop")
    _check_bool(mix_compile_mode, "mix_compile_mode")
    if mix_compile_mode and iterations_per_loop != 1:
        raise ValueError(
            f"NPURunConfig: iterations_per_loop must be 1 when mix_compile_mode is True, got {iterations_per_loop}."
        )
    _check_bool(horovod_mode, "horovod_mode")
    check_nonnegative_int(graph_run_mode, "NPURunConfig.graph_run_mode")
    if graph_run_mode > 1:
        raise ValueError(f"NPURunConfig: graph_run_mode must be 0 or 1, got {graph_run_mode}.")
    check_nonnegative_int(enable_exception_dump, "NPURunConfig.enable_exception_dump")
    if precision_mode is not None and not isinstance(precision_mode, str):
        raise TypeError(f"NPURunConfig: precision_mode must be a string, got {type_name(precision_mode)}.")


class NPURunConfig(RunConfig):
    """RunConfig of ``jaxspec.NPUEstimator``, as Ascend's ``NPURunConfig``.

    Defaults differ from RunConfig as in the adapter: ``iterations_per_loop=1``,
    ``save_summary_steps=0``, and ``save_checkpoints_steps=100`` when neither checkpoint
    interval is given.

    Args:
      iterations_per_loop: steps run on device in one compiled loop (``lax.scan``) per
        host round trip; a positive int. Forced to 1 when ``aoe_mode`` (or the
        ``AOE_MODE`` environment variable) is set, as in the adapter.
      model_dir, tf_random_seed, save_summary_steps, save_checkpoints_steps,
      save_checkpoints_secs, session_config, keep_checkpoint_max,
      keep_checkpoint_every_n_hours, log_step_count_steps, train_distribute,
      eval_distribute: as RunConfig.
      precision_mode: None or the adapter's string. ``compute_dtype`` gives the JAX dtype
        it maps to (``PRECISION_DTYPES``), and ``precision_policy`` the
        ``jaxspec.train_utils.mixed_precision.Policy`` model_fn casts with when that dtype is
        float16 or bfloat16; values without a JAX counterpart are recorded and ignored
        with a warning.
      enable_reduce_precision, variable_format_optimize, enable_data_pre_proc,
      is_tailing_optimization, hcom_parallel: stored.
      mix_compile_mode: bool; True needs ``iterations_per_loop == 1``.
      horovod_mode: bool, stored.
      graph_run_mode: 0 or 1 (1: training).
      op_debug_level, enable_exception_dump (int >= 0), aoe_mode, distribute,
      profiling_config, dump_config, dynamic_input_config: stored.
      **npu_options: any other adapter option, stored in ``npu_options``.

    Raises:
      TypeError: iterations_per_loop, graph_run_mode or enable_exception_dump is not an
        int; precision_mode is not a string.
      ValueError: iterations_per_loop <= 0; mix_compile_mode or horovod_mode not a bool;
        mix_compile_mode with iterations_per_loop != 1; graph_run_mode not 0 or 1;
        negative enable_exception_dump; or as RunConfig.
    """

    def __init__(
        self,
        iterations_per_loop: int = 1,
        profiling_config: Any = None,
        model_dir: str | None = None,
        tf_random_seed: int | None = None,
        save_summary_steps: int | None = 0,
        save_checkpoints_steps: int | None = None,
        save_checkpoints_secs: int | None = None,
        session_config: Any = None,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: float = 10000,
        log_step_count_steps: int | None = 100,
        distribute: Any = None,
        enable_data_pre_proc: bool = True,
        precision_mode: str | None = None,
        enable_reduce_precision: bool = False,
        variable_format_optimize: bool = True,
        mix_compile_mode: bool = False,
        hcom_parallel: bool = False,
        dump_config: Any = None,
        is_tailing_optimization: bool = False,
        horovod_mode: bool = False,
        graph_run_mode: int = 1,
        op_debug_level: int = 0,
        enable_exception_dump: int = 0,
        dynamic_input_config: Any = None,
        aoe_mode: Any = None,
        train_distribute: Any = None,
        eval_distribute: Any = None,
        **npu_options: Any,
    ) -> None:
        _check_npu_fields(
            iterations_per_loop,
            mix_compile_mode,
            horovod_mode,
            graph_run_mode,
            enable_exception_dump,
            precision_mode,
        )
        if save_checkpoints_steps is None and save_checkpoints_secs is None:
            save_checkpoints_steps = 100
        tuned = aoe_mode is not None or os.getenv("AOE_MODE") is not None
        extra = dict(
            iterations_per_loop=1 if tuned else iterations_per_loop,
            profiling_config=profiling_config,
            distribute=distribute,
            enable_data_pre_proc=enable_data_pre_proc,
            precision_mode=precision_mode,
            enable_reduce_precision=enable_reduce_precision,
            variable_format_optimize=variable_format_optimize,
            mix_compile_mode=mix_compile_mode,
            hcom_parallel=hcom_parallel,
            dump_config=dump_config,
            is_tailing_optimization=is_tailing_optimization,
            horovod_mode=horovod_mode,
            graph_run_mode=graph_run_mode,
            op_debug_level=op_debug_level,
            enable_exception_dump=enable_exception_dump,
            dynamic_input_config=dynamic_input_config,
            aoe_mode=aoe_mode,
            npu_options=dict(npu_options),
        )
        for key, value in extra.items():
            object.__setattr__(self, key, value)
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
        if precision_mode is not None and precision_mode not in PRECISION_DTYPES:
            known = "has no JAX counterpart" if precision_mode in UNMAPPED_PRECISION_MODES else "is not known"
            _log.warning(
                "NPURunConfig: precision_mode %r %s; it is recorded and ignored.", precision_mode, known
            )

    @property
    def compute_dtype(self) -> Any:
        """The JAX dtype ``precision_mode`` maps to (``jnp.float16``, ``jnp.bfloat16``,
        ``jnp.float32``), or None when it is None or has no mapping."""
        name = PRECISION_DTYPES.get(self.precision_mode or "")
        if name is None:
            return None
        import jax.numpy as jnp

        return getattr(jnp, name)

    @property
    def precision_policy(self) -> Any:
        """A ``jaxspec.train_utils.mixed_precision.Policy(compute_dtype, param_dtype=float32)`` when
        ``precision_mode`` asks for reduced precision (float16 or bfloat16 compute), else
        None. NPUEstimator passes it to model_fn as ``params['precision_policy']`` too;
        model_fn casts with it (XLA does not cast a model by itself, the NPU's graph
        engine did)."""
        name = PRECISION_DTYPES.get(self.precision_mode or "")
        if name is None or name == "float32":
            return None
        from jaxspec.train_utils.mixed_precision import Policy

        return Policy(self.compute_dtype)
