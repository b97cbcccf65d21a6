"""model_fn checks the Estimators share: its arguments at construction, and each call
(labels it cannot take, the spec class it returns).

tf.estimator makes these checks in ``Estimator.__init__`` (``_verify_model_fn_args``)
and ``Estimator._call_model_fn``; TPUEstimator and Ascend's NPUEstimator wrap model_fn to
add theirs. jaxspec does the same: the Estimator wraps the user's model_fn in a
``ModelFnCaller`` that the engine calls with every argument by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from jaxspec._checks import type_name
from jaxspec._fn_args import call_with_declared, fn_arg_names
from jaxspec.rules import model_fn as rules_model_fn
from jaxspec.spec.fn_types import Array, Features, Labels, ModelFn, State

if TYPE_CHECKING:
    from jaxspec.config.run_config import RunConfig
    from jaxspec.spec import EstimatorSpec, TPUEstimatorSpec

_log = logging.getLogger("jaxspec")

#: What a model_fn may declare: tf.estimator's names, then jaxspec's additions.
MODEL_FN_ARGS = ("features", "labels", "mode", "params", "config", "state", "rng", "global_step")

# What a model_fn returns, once checked: an EstimatorSpec (NPUEstimatorSpec included) or
# a TPUEstimatorSpec.
ModelFnSpec: TypeAlias = "EstimatorSpec | TPUEstimatorSpec"
# ``check_spec(returned, mode, params)``: the spec, or an error.
SpecCheck: TypeAlias = Callable[[object, str, dict[str, Any]], ModelFnSpec]


def verify_model_fn_args(model_fn: ModelFn, params: Mapping[str, object] | None) -> tuple[str, ...]:
    """Check model_fn's declared arguments at construction, as tf.estimator does, against
    ``MODEL_FN_ARGS`` (``jaxspec.rules.model_fn.verify_model_fn_args``; the warning goes
    to the ``jaxspec`` logger).

    A model_fn that takes ``params`` while ``params`` is None gets a warning and
    ``params = {}``: TF 2.15 warns there too, TPUEstimator included (it checks the user's
    params before adding ``batch_size``).

    Returns:
      The argument names model_fn declares.

    Raises:
      ValueError: see ``jaxspec.rules.model_fn.verify_model_fn_args``.
    """
    return rules_model_fn.verify_model_fn_args(model_fn, params, MODEL_FN_ARGS, _log)


class ModelFnCaller:
    """What the engine calls in place of the user's model_fn.

    It takes every argument by name, passes the user's model_fn those it declares, and
    checks the call as tf.estimator's ``_call_model_fn`` does: labels that model_fn
    cannot take are a ValueError, and ``check_spec(spec, mode, params)`` decides which
    spec classes this Estimator accepts (and may raise).

    Args:
      model_fn: the user's model_fn (already checked by ``verify_model_fn_args``).
      check_spec: the Estimator's check of the returned value; returns the spec.
      needs_params: model_fn must declare ``params`` (TPUEstimator passes the batch
        size there); checked at each call, as TPUEstimator does.
    """

    def __init__(self, model_fn: ModelFn, check_spec: SpecCheck, needs_params: bool = False) -> None:
        self.user_model_fn = model_fn
        self._names = fn_arg_names(model_fn)
        self._check_spec = check_spec
        self._needs_params = needs_params

    def __repr__(self) -> str:
        return f"ModelFnCaller({self.user_model_fn!r})"

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
        """Call the user's model_fn with the arguments it declares; return its checked spec.

        Raises:
          ValueError: labels is not None but model_fn takes no ``labels``; model_fn takes
            no ``params`` where the Estimator requires it; or ``check_spec``'s errors.
        """
        if "labels" not in self._names and labels is not None:
            raise ValueError(
                "input_fn returned labels (features, labels), but model_fn takes no 'labels' argument."
            )
        if self._needs_params and "params" not in self._names:
            raise ValueError(
                "model_fn must take a 'params' argument: TPUEstimator passes the per-replica batch size "
                "as params['batch_size']."
            )
        available = dict(
            features=features,
            labels=labels,
            mode=mode,
            params=params,
            config=config,
            state=state,
            rng=rng,
            global_step=global_step,
        )
        spec = call_with_declared(self.user_model_fn, available, self._names)
        return self._check_spec(spec, mode, params)


def estimator_spec_check(spec: object, mode: str, params: dict[str, Any]) -> EstimatorSpec:
    """``Estimator``'s rule: model_fn returns an EstimatorSpec (NPUEstimatorSpec included;
    a TPUEstimatorSpec is not one, as in tf.estimator).

    Raises:
      ValueError: anything else, naming EstimatorSpec and what was returned.
    """
    from jaxspec.spec import EstimatorSpec

    if not isinstance(spec, EstimatorSpec):
        raise ValueError(f"model_fn must return an EstimatorSpec, got {type_name(spec)} in {mode} mode.")
    return spec


def tpu_spec_check(spec: object, mode: str, on_mesh: bool, eval_on_mesh: bool = True) -> ModelFnSpec:
    """``TPUEstimator``'s rules for what model_fn returns.

    Off the mesh (``use_tpu=False``, and every export): an EstimatorSpec or a
    TPUEstimatorSpec (run as ``as_estimator_spec()``). On the mesh: TRAIN takes either,
    but an EstimatorSpec may not carry ``training_chief_hooks``; EVAL (with
    ``eval_on_tpu``) and PREDICT need a TPUEstimatorSpec, and PREDICT's predictions must
    be a dict.

    Raises:
      ValueError: not a spec at all (any mode), or an EstimatorSpec with
        training_chief_hooks in TRAIN on the mesh.
      RuntimeError: not a TPUEstimatorSpec in EVAL/PREDICT on the mesh (TPUEstimator's type).
      TypeError: PREDICT on the mesh with predictions that are not a dict.
    """
    from jaxspec.mode_keys import ModeKeys
    from jaxspec.spec import EstimatorSpec, TPUEstimatorSpec

    is_tpu_spec = isinstance(spec, TPUEstimatorSpec)
    needs_tpu_spec = on_mesh and (mode == ModeKeys.PREDICT or (mode == ModeKeys.EVAL and eval_on_mesh))
    if needs_tpu_spec and not is_tpu_spec:
        phase = "evaluation" if mode == ModeKeys.EVAL else "prediction"
        raise RuntimeError(
            f"TPUEstimator {phase} on the mesh (use_tpu=True) needs model_fn to return a "
            f"TPUEstimatorSpec, got {type_name(spec)}."
        )
    if not isinstance(spec, (TPUEstimatorSpec, EstimatorSpec)):
        raise ValueError(
            f"model_fn must return a TPUEstimatorSpec or an EstimatorSpec, got {type_name(spec)} in {mode} mode."
        )
    if on_mesh and mode == ModeKeys.TRAIN and isinstance(spec, EstimatorSpec) and spec.training_chief_hooks:
        raise ValueError(
            "TPUEstimator cannot run EstimatorSpec.training_chief_hooks on the mesh; pass those hooks "
            "in training_hooks instead."
        )
    if on_mesh and mode == ModeKeys.PREDICT and not isinstance(spec.predictions, dict):
        raise TypeError(
            "TPUEstimatorSpec.predictions must be a dict of arrays for prediction on the mesh, "
            f"got {type_name(spec.predictions)}."
        )
    return spec


def npu_spec_check(spec: object, mode: str) -> EstimatorSpec:
    """Ascend ``NPUEstimator``'s rules: model_fn returns an EstimatorSpec or an
    NPUEstimatorSpec (a TPUEstimatorSpec is neither).

    Raises:
      RuntimeError: anything else in TRAIN or EVAL (the adapter's type there).
      ValueError: anything else in PREDICT (tf.estimator's Estimator check, which the
        adapter leaves in place for that mode).
    """
    from jaxspec.mode_keys import ModeKeys
    from jaxspec.spec import EstimatorSpec

    if isinstance(spec, EstimatorSpec):
        return spec
    if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
        raise RuntimeError(
            f"NPUEstimator needs model_fn to return an NPUEstimatorSpec or EstimatorSpec in {mode} mode, "
            f"got {type_name(spec)}."
        )
    return estimator_spec_check(spec, mode, {})
