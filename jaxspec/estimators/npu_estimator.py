"""NPUEstimator: Ascend's ``npu_bridge.estimator.npu.npu_estimator.NPUEstimator`` on JAX."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax

from jaxspec.config.npu_config import NPURunConfig
from jaxspec.config.run_config import RunConfig
from jaxspec.config.warm_start_settings import WarmStartSettings
from jaxspec.estimators._model_fn import ModelFnSpec, npu_spec_check
from jaxspec.estimators.estimator import Estimator
from jaxspec.loop.plan import RunPlan
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import Array, Features, InitFn, Labels, ModelFn, PyTree, State
from jaxspec.train_utils.mixed_precision import Policy, computes_in

_log = logging.getLogger("jaxspec")
PRECISION_POLICY_KEY = "precision_policy"


class PrecisionCheckedModelFn:
    """The Estimator's model_fn wrapper, plus one look at the first TRAIN trace: when no
    matmul or convolution of model_fn's train step takes ``policy.compute_dtype``
    operands, one warning says so (the NPU cast the graph itself; XLA does not).

    The look traces model_fn once more (``jax.make_jaxpr``, inside the first TRAIN
    trace, on the same abstract arguments): its jaxpr is only read, never run.
    """

    def __init__(self, caller: ModelFn, policy: Policy) -> None:
        self._caller = caller
        self.user_model_fn = getattr(caller, "user_model_fn", caller)
        self.policy = policy
        self.checked = False

    def __repr__(self) -> str:
        return f"PrecisionCheckedModelFn({self.user_model_fn!r}, {self.policy})"

    def __call__(
        self,
        features: Features,
        labels: Labels,
        mode: str,
        params: dict[str, Any],
        config: RunConfig,
        state: State,
        rng: Array | None,
        global_step: Array,
    ) -> ModelFnSpec:
        """As ``ModelFnCaller.__call__`` (every argument by name), after the look."""
        args = dict(
            features=features,
            labels=labels,
            mode=mode,
            params=params,
            config=config,
            state=state,
            rng=rng,
            global_step=global_step,
        )
        if mode == ModeKeys.TRAIN and not self.checked:
            self.checked = True
            self._check(args)
        return self._caller(**args)

    def _check(self, args: dict[str, Any]) -> None:
        arrays = {k: v for k, v in args.items() if k not in ("mode", "params", "config")}

        def step(arrays: dict[str, PyTree]) -> list[Array]:
            spec = self._caller(**{**args, **arrays})
            return jax.tree.leaves((spec.loss, spec.train_op))

        jaxpr = jax.make_jaxpr(step)(arrays)
        if not computes_in(jaxpr, self.policy.compute_dtype):
            _log.warning(
                "NPUEstimator: precision_mode asks for %s compute, but model_fn's train step does no "
                "matmul or convolution in %s. jaxspec cannot cast a model by itself: cast inputs and "
                "parameters with params['precision_policy'] (a jaxspec.train_utils.mixed_precision.Policy), or "
                "give the model's layers that dtype.",
                self.policy.compute_dtype.name,
                self.policy.compute_dtype.name,
            )


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

    A ``precision_mode`` asking for float16 or bfloat16 compute gives model_fn
    ``config.precision_policy`` and ``params['precision_policy']``, a
    ``jaxspec.train_utils.mixed_precision.Policy``; the adapter's graph engine cast the model itself,
    XLA does not, so model_fn casts with it. When the first traced train step does no
    matmul or convolution in that dtype, one warning says so.

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
        warm_start_from: str | os.PathLike[str] | WarmStartSettings | None = None,
        init_fn: InitFn | None = None,
    ) -> None:
        if config is None or not isinstance(config, NPURunConfig):
            raise ValueError(f"NPUEstimator needs config, an NPURunConfig; got {type(config).__name__}.")
        super().__init__(model_fn, model_dir, config, params, warm_start_from, init_fn)
        self._job_start_file = job_start_file
        self._precision_policy = config.precision_policy
        if self._precision_policy is not None:
            self._model_fn = PrecisionCheckedModelFn(self._model_fn, self._precision_policy)

    def _check_spec(self, spec: object, mode: str, params: dict[str, Any]) -> ModelFnSpec:
        """The adapter's rule (``npu_spec_check``)."""
        return npu_spec_check(spec, mode)

    def _run_plan(self, mode: str, for_export: bool = False) -> RunPlan:
        """NPUEstimator's plan: one device, ``NPURunConfig.iterations_per_loop`` steps per
        compiled loop (exports: one step, as any export)."""
        plan = super()._run_plan(mode, for_export)
        if self._precision_policy is not None:
            params = dict(plan.model_params, **{PRECISION_POLICY_KEY: self._precision_policy})
            plan = dataclasses.replace(plan, model_params=params)
        if for_export:
            return plan
        every = self._config.iterations_per_loop  # type: ignore[attr-defined]  # NPURunConfig sets it by name
        return dataclasses.replace(plan, iterations_per_loop=every)
