"""``tf_bridge.NPUEstimator``: Ascend's NPUEstimator, or its CPU equivalent.

When ``npu_bridge`` (Ascend's TensorFlow adapter) imports, ``NPUEstimator(...)`` returns
the adapter's own NPUEstimator, built from the same arguments: the config becomes the
adapter's NPURunConfig and the model_fn's tf_bridge specs become the adapter's
NPUEstimatorSpec. Otherwise it runs on TensorFlow's CPU with the adapter's behaviour:

- ``config`` must be an ``NPURunConfig``; a model_fn returning something other than an
  (NPU)EstimatorSpec in TRAIN/EVAL is a RuntimeError, as in the adapter;
- ``iterations_per_loop`` steps run per loop in TRAIN, hooks seeing each loop once and
  the global step advancing by the loop's length (the last loop is cut to stop exactly
  at ``steps``/``max_steps``);
- ``host_call`` (TRAIN and EVAL): ``host_fn`` is called once in the graph on the step's
  own values (in TRAIN read before ``train_op`` updates any variable, so a global step
  passed in is the one the step started from, as TPUEstimator's; in EVAL taken after
  ``loss``), and what it returns runs at every step, inside loops too, so it sees every
  step's values in order;
  ``tf.summary`` writers it uses are initialised and flushed as the adapter's hook does;
- ``RESTORE_FROM`` in the environment warm-starts when ``warm_start_from`` is None;
- ``job_start_file`` and the NPU-only config fields are accepted and logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import PyTree
from jaxspec.spec.host_call import call_with_tensors
from tf_bridge.runtime.host_call_order import order_before_update
from tf_bridge.runtime.module_map import MergedModule
from tf_bridge.runtime.npu.config import NPURunConfig
from tf_bridge.runtime.npu.optimizer import rank_size
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator, WarmStartFrom
from tf_bridge.runtime.runner.inputs import call_model_fn, fn_arg_names
from tf_bridge.runtime.runner.v1_forms import V1Methods
from tf_bridge.runtime.runner_hooks import HostCallFetchHook
from tf_bridge.runtime.spec import EstimatorSpec, NPUEstimatorSpec

_log = logging.getLogger("tf_bridge")


def load_adapter() -> tuple[ModuleType, ModuleType] | None:
    """Ascend's ``npu_bridge.estimator.npu`` modules (npu_estimator, npu_config), or None
    when ``npu_bridge`` does not import or is tf_bridge's own stand-in (``tf_bridge.install()``
    where the adapter is absent)."""
    try:  # optional: Ascend's adapter is installed only on NPU hosts
        from npu_bridge.estimator.npu import npu_config, npu_estimator
    except ImportError:
        return None
    if isinstance(npu_estimator, MergedModule):
        return None
    return npu_estimator, npu_config


def _to_adapter_spec(spec: object, adapter_spec_type: type) -> object:
    """A tf_bridge EstimatorSpec / NPUEstimatorSpec as the adapter's NPUEstimatorSpec;
    anything else is returned unchanged (the adapter then judges it)."""
    if not isinstance(spec, EstimatorSpec):
        return spec
    fields = spec._asdict()
    fields["host_call"] = spec.host_call if isinstance(spec, NPUEstimatorSpec) else None
    return adapter_spec_type(**fields)


def _adapter_estimator(
    adapter: tuple[ModuleType, ModuleType],
    model_fn: Callable[..., object],
    model_dir: str | os.PathLike[str] | None,
    config: object,
    params: dict[str, object] | None,
    job_start_file: str,
    warm_start_from: WarmStartFrom,
) -> object:
    """The adapter's NPUEstimator running ``model_fn``, with tf_bridge's config and specs
    translated."""
    npu_estimator, npu_config = adapter
    if not isinstance(config, NPURunConfig):
        raise ValueError(f"NPUEstimator needs config, a tf_bridge NPURunConfig; got {type(config).__name__}.")
    names = fn_arg_names(model_fn)

    def adapter_model_fn(
        features: PyTree, labels: PyTree, mode: str, params: dict[str, object], config: object
    ) -> object:
        available = {"labels": labels, "mode": mode, "params": params, "config": config}
        kwargs = {name: available[name] for name in names if name in available}
        return _to_adapter_spec(model_fn(features=features, **kwargs), npu_estimator.NPUEstimatorSpec)

    return npu_estimator.NPUEstimator(
        model_fn=adapter_model_fn,
        model_dir=model_dir,
        config=npu_config.NPURunConfig(**config.adapter_kwargs()),
        params=params,
        job_start_file=job_start_file,
        warm_start_from=warm_start_from,
    )


def _attach_host_call(spec: NPUEstimatorSpec, mode: str) -> NPUEstimatorSpec:
    """The spec with its host_call turned into a per-step HostCallFetchHook (first hook of the
    mode) and ``loss`` made to depend on the host_call's tensors. In TRAIN the tensors are
    read before the train op updates any variable (``order_before_update``); in EVAL after
    ``loss``."""
    host_fn, tensors = spec.host_call
    if mode == ModeKeys.TRAIN:
        step_values = order_before_update(tensors, spec.train_op)
    else:
        with tf.control_dependencies([spec.loss]):
            step_values = tf.nest.map_structure(tf.identity, tensors)
    fetches = call_with_tensors(host_fn, step_values)
    with tf.control_dependencies(tf.nest.flatten(step_values)):
        loss = tf.identity(spec.loss)
    hook = HostCallFetchHook(fetches)
    if mode == ModeKeys.TRAIN:
        return spec._replace(loss=loss, training_hooks=(hook,) + tuple(spec.training_hooks))
    return spec._replace(loss=loss, evaluation_hooks=(hook,) + tuple(spec.evaluation_hooks))


class NPUEstimator(V1Methods, Estimator):
    """Ascend's ``NPUEstimator`` (see the module docstring for the CPU behaviour).

    Args:
      model_fn: returns a ``tf_bridge.NPUEstimatorSpec`` or ``EstimatorSpec``.
      model_dir, params, warm_start_from: as Estimator.
      config: an ``NPURunConfig``; required.
      job_start_file: the adapter's job configuration file (NPU only; logged on CPU).

    Raises:
      ValueError: config missing or not an NPURunConfig; as Estimator.
      RuntimeError: ``RANK_SIZE`` > 1 without npu_bridge (one process on CPU); (TRAIN/EVAL)
        model_fn returned neither spec type.
    """

    _config_type = NPURunConfig

    def __new__(
        cls,
        model_fn: Callable[..., EstimatorSpec] | None = None,
        model_dir: str | os.PathLike[str] | None = None,
        config: NPURunConfig | None = None,
        params: dict[str, object] | None = None,
        job_start_file: str = "",
        warm_start_from: WarmStartFrom = None,
    ) -> Any:  # the adapter's NPUEstimator where npu_bridge is installed, else cls()
        adapter = load_adapter() if cls is NPUEstimator else None
        if adapter is not None:
            return _adapter_estimator(
                adapter, model_fn, model_dir, config, params, job_start_file, warm_start_from
            )
        return super().__new__(cls)

    def __init__(
        self,
        model_fn: Callable[..., EstimatorSpec] | None = None,
        model_dir: str | os.PathLike[str] | None = None,
        config: NPURunConfig | None = None,
        params: dict[str, object] | None = None,
        job_start_file: str = "",
        warm_start_from: WarmStartFrom = None,
    ) -> None:
        if config is None or not isinstance(config, NPURunConfig):
            raise ValueError(f"NPUEstimator needs config, an NPURunConfig; got {type(config).__name__}.")
        if rank_size() > 1:
            raise RuntimeError(
                f"RANK_SIZE={rank_size()} but npu_bridge is not installed: the CPU path runs one process."
            )
        if job_start_file:
            _log.info("NPUEstimator on CPU: job_start_file %r is not used.", job_start_file)
        npu_only = config.npu_only_settings()
        if npu_only:
            _log.info("NPUEstimator on CPU: NPU-only settings accepted, without effect here: %s", npu_only)
        if warm_start_from is None and os.environ.get("RESTORE_FROM"):
            warm_start_from = os.environ["RESTORE_FROM"]
        super().__init__(
            model_fn=model_fn,
            model_dir=model_dir,
            config=config,
            params=params,
            warm_start_from=warm_start_from,
        )

    def _iterations_per_loop(self) -> int:
        return self._config.iterations_per_loop

    def _call_model_fn(
        self, features: PyTree, labels: PyTree, mode: str, config: RunConfig, export: bool = False
    ) -> EstimatorSpec:
        """model_fn; in TRAIN and EVAL an NPUEstimatorSpec's host_call joins the hooks.

        Raises:
          RuntimeError: (TRAIN/EVAL) model_fn returned neither spec type.
          ValueError: (PREDICT) model_fn returned no EstimatorSpec.
        """
        spec = call_model_fn(self._model_fn, features, labels, mode, self.params, config, (object,))
        if not isinstance(spec, EstimatorSpec):
            if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
                raise RuntimeError(
                    f"model_fn must return a tf_bridge NPUEstimatorSpec or EstimatorSpec in {mode}; "
                    f"it returned a {type(spec).__name__}."
                )
            raise ValueError(
                f"model_fn must return a tf_bridge EstimatorSpec; it returned a {type(spec).__name__}."
            )
        if (
            isinstance(spec, NPUEstimatorSpec)
            and spec.host_call is not None
            and mode in (ModeKeys.TRAIN, ModeKeys.EVAL)
        ):
            spec = _attach_host_call(spec, mode)
        return spec
