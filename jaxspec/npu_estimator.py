"""NPUEstimator: Ascend's ``npu_bridge.estimator.npu.npu_estimator.NPUEstimator`` on JAX."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxspec._model_fn import npu_spec_check
from jaxspec.estimator import Estimator
from jaxspec.loop.plan import RunPlan
from jaxspec.npu_config import NPURunConfig
from jaxspec.spec.fn_types import InitFn, ModelFn


class NPUEstimator(Estimator):
    """An Estimator for model_fns written for Ascend's NPUEstimator.

    model_fn returns an ``NPUEstimatorSpec`` (or a plain ``EstimatorSpec``). Each
    train/evaluate/predict call runs ``config.iterations_per_loop`` steps per compiled
    loop on one device (a ``lax.scan``, the JAX form of the NPU's on-device loop), and an
    NPUEstimatorSpec's ``host_call`` runs on the host once per TRAIN/EVAL step, in step
    order, with that step's tensors as numpy arrays (ignored in PREDICT), as the
    adapter's outfeed does. JAX differences are Estimator's (explicit ``state`` from
    ``init_fn``; ``train_op`` is the new state).

    Args:
      model_fn, model_dir, params, warm_start_from, init_fn: as Estimator.
      config: an NPURunConfig, required.
      job_start_file: accepted for the adapter's signature; JAX finds its devices and
        processes itself (``jax.distributed``), so the file is not read.

    Calls are checked as the adapter does: a TRAIN or EVAL model_fn that returns neither
    an NPUEstimatorSpec nor an EstimatorSpec is a RuntimeError; in PREDICT it is
    Estimator's ValueError. Labels that model_fn cannot take are a ValueError, as in
    tf.estimator (the adapter drops them silently).

    Raises:
      ValueError: config is not an NPURunConfig (checked first); or as Estimator.
    """

    def __init__(
        self,
        model_fn: ModelFn | None = None,
        model_dir: str | None = None,
        config: NPURunConfig | None = None,
        params: dict[str, Any] | None = None,
        job_start_file: str = "",
        warm_start_from: Any = None,
        init_fn: InitFn | None = None,
    ) -> None:
        if config is None or not isinstance(config, NPURunConfig):
            raise ValueError(f"NPUEstimator needs config, an NPURunConfig; got {type(config).__name__}.")
        super().__init__(model_fn, model_dir, config, params, warm_start_from, init_fn)
        self._job_start_file = job_start_file

    def _check_spec(self, spec: Any, mode: str, params: dict[str, Any]) -> Any:
        """The adapter's rule (``npu_spec_check``)."""
        return npu_spec_check(spec, mode)

    def _run_plan(self, mode: str, for_export: bool = False) -> RunPlan:
        """NPUEstimator's plan: one device, ``NPURunConfig.iterations_per_loop`` steps per
        compiled loop (exports: one step, as any export)."""
        plan = super()._run_plan(mode, for_export)
        if for_export:
            return plan
        return dataclasses.replace(plan, iterations_per_loop=self._config.iterations_per_loop)
