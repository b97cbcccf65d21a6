"""TFRunPlan: what tf_bridge's runner needs for one train/evaluate/predict/export call,
built once by the Estimator (``Estimator._run_plan``) and never read back from it.

The runner modules (``train``, ``evaluate``, ``predict``, ``saved_model_export``) receive a
plan and never an Estimator: the subclass hooks tf.estimator let Estimators override
(``_create_global_step``, ``_call_model_fn``, the params input_fn sees) arrive as the
plan's bound callables, so a subclass still changes what the runner does.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.runtime.runner.inputs import call_input_fn, parse_input_fn_result

if TYPE_CHECKING:
    from jaxspec.rules.warm_start import WarmStartSettingsBase
    from tf_bridge.runtime.run_config import RunConfig
    from tf_bridge.runtime.runner.predict_cache import PredictCache
    from tf_bridge.runtime.spec import EstimatorSpec


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """What one ``train`` call runs: the stop condition and the loop size.

    Attributes:
      last_step: global step at which a loop is cut short so that training stops
        exactly there, or None (until a hook stops it or the input ends).
      iterations_per_loop: steps per loop (hooks run once per loop); 1 for tf.estimator.
    """

    last_step: int | None = None
    iterations_per_loop: int = 1


@dataclasses.dataclass(frozen=True)
class TFRunPlan:
    """An immutable description of one call of a tf_bridge Estimator in ``mode``.

    Attributes:
      mode: a ModeKeys value.
      config: the RunConfig given to input_fn and model_fn as ``config`` (the plan's own
        copy).
      session_config: the ``tf.compat.v1.ConfigProto`` of every session of the call.
      create_global_step: ``graph -> variable``: makes the ``global_step`` variable.
      model_fn: ``(features, labels) -> EstimatorSpec``: the Estimator's model_fn call
        with this mode, params and config bound, its spec checked (and converted, for
        TPUEstimatorSpec / NPUEstimatorSpec).
      input_params: params as input_fn sees them in this mode (read-only; each call gets
        a copy).
      warm_start: WarmStartSettings applied when nothing is restored, or None.
      check_predict_input: warn when a predict input has neither a Dataset nor a queue
        runner (tf.estimator's check; TPUEstimator skips it).
      train: the TRAIN call's stop step and loop size.
      predict_cache: where predict keeps its graph and session between calls (the one
        mutable member, owned by the Estimator), or None for no caching.
    """

    mode: str
    config: RunConfig
    session_config: tf.compat.v1.ConfigProto | None
    create_global_step: Callable[[tf.Graph], tf.Variable | None]
    model_fn: Callable[[PyTree, PyTree], EstimatorSpec]
    input_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    warm_start: WarmStartSettingsBase | None = None
    check_predict_input: bool = True
    train: TrainPlan = TrainPlan()
    predict_cache: PredictCache | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_params", MappingProxyType(copy.deepcopy(dict(self.input_params))))

    @property
    def model_dir(self) -> str:
        """The model directory (``config.model_dir``)."""
        return self.config.model_dir

    def replace(self, **changes: Any) -> TFRunPlan:
        """A new plan with ``changes`` (the plan itself never changes)."""
        return dataclasses.replace(self, **changes)

    def input_fn_result(self, input_fn: InputFn) -> object:
        """What input_fn returns, called with this mode, a copy of ``input_params`` and
        ``config`` (in the current default graph, or eagerly outside one)."""
        return call_input_fn(input_fn, self.mode, copy.deepcopy(dict(self.input_params)), self.config)

    def call_input_fn(
        self, input_fn: InputFn
    ) -> tuple[PyTree, PyTree, list[tf.compat.v1.train.SessionRunHook]]:
        """(features, labels, input hooks) from input_fn (``input_fn_result``), in the
        current default graph."""
        return parse_input_fn_result(self.input_fn_result(input_fn))

    def maybe_warm_start(self, restoring: bool) -> None:
        """Apply the warm start (``tf.compat.v1.train.warm_start``) unless a checkpoint is
        restored, as tf.estimator did."""
        if not restoring and self.warm_start is not None:
            tf.compat.v1.train.warm_start(*self.warm_start)
