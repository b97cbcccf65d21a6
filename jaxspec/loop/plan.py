"""RunPlan: everything the loop needs to run one train/evaluate/predict call (or an
export's restore), described once by an Estimator and never read back from it."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from jax.sharding import Mesh

from jaxspec.config.run_config import InputPipelineConfig, RunConfig
from jaxspec.config.warm_start_settings import WarmStartSettings
from jaxspec.loop.call_cache import EstimatorCache
from jaxspec.spec.fn_types import InitFn, ModelFn
from jaxspec.store.checkpoints import CheckpointStore

BATCH_SIZE_KEY = "batch_size"


def _frozen(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(copy.deepcopy(dict(params or {})))


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """An immutable description of one call of an Estimator.

    Each Estimator builds its plans in one method (``Estimator._run_plan(mode)``;
    TPUEstimator and NPUEstimator override only that); ``Phase`` and
    ``run_train`` / ``run_evaluate`` / ``run_predict`` read everything from the plan.

    Attributes:
      mode: a ModeKeys value.
      model_fn: what the engine calls in place of the user's model_fn (every argument by
        name; a ``jaxspec.estimators._model_fn.ModelFnCaller``).
      init_fn: builds the first state (arguments by name: rng, features, labels, params,
        config), or None (the state is then an empty dict).
      config: the RunConfig passed to model_fn and input_fn as ``config``.
      store: the CheckpointStore of ``config.model_dir``.
      mesh: the replica Mesh, or None for one device (``jax.jit`` only).
      iterations_per_loop: steps per compiled loop (a count >= 1).
      loop_duration_secs: when ``TPUConfig.iterations_per_loop`` is a duration, the
        seconds a training loop should last (the loop then resizes itself); else None.
      input_pipeline: the input pipeline in effect (PER_HOST_V1 off the mesh).
      global_batch_size: examples per step over all replicas, or None (input_fn decides).
      input_params: params as input_fn sees them (its ``batch_size``: per host or per
        replica, by pipeline).
      model_params: params as model_fn sees them (its ``batch_size``: per replica).
      warm_start: WarmStartSettings applied in TRAIN when nothing is restored, or None.
      host_call_every_n_steps: in TRAIN, host_call runs on the steps whose global step is
        a multiple of this (``TPUConfig.experimental_host_call_every_n_steps``).
      partition_rules: ``(regex, PartitionSpec)`` pairs laying the state out over the
        mesh's ``'core'`` axis (see ``jaxspec.engine.partitioning``), or None.
      compile_cache: the EstimatorCache the Estimator keeps across calls (compiled
        loops, the state's tree, the last call's state); the one mutable member, shared
        on purpose.
    """

    mode: str
    model_fn: ModelFn
    init_fn: InitFn | None
    config: RunConfig
    store: CheckpointStore
    mesh: Mesh | None = None
    iterations_per_loop: int = 1
    loop_duration_secs: float | None = None
    input_pipeline: InputPipelineConfig = InputPipelineConfig.PER_HOST_V1
    global_batch_size: int | None = None
    input_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    model_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    warm_start: WarmStartSettings | None = None
    host_call_every_n_steps: int = 1
    partition_rules: Any = None
    compile_cache: EstimatorCache = dataclasses.field(
        default_factory=EstimatorCache, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_params", _frozen(self.input_params))
        object.__setattr__(self, "model_params", _frozen(self.model_params))
        if self.mesh is None:
            object.__setattr__(self, "input_pipeline", InputPipelineConfig.PER_HOST_V1)

    @property
    def model_dir(self) -> str:
        """The model directory (``config.model_dir``, which the Estimator settles before
        it plans a call).

        Raises:
          ValueError: the config has no model_dir.
        """
        if self.config.model_dir is None:
            raise ValueError("RunPlan: config.model_dir is None; resolve_model_dir() settles it first.")
        return self.config.model_dir

    @property
    def seed(self) -> int | None:
        """``config.tf_random_seed``: the root of init_fn's and model_fn's ``rng``."""
        return self.config.tf_random_seed

    @property
    def broadcast(self) -> bool:
        """Every replica gets the whole input batch (BROADCAST on the mesh)."""
        return self.mesh is not None and self.input_pipeline is InputPipelineConfig.BROADCAST

    @property
    def input_batch_size(self) -> int | None:
        """input_fn's ``params['batch_size']``, or None."""
        return self.input_params.get(BATCH_SIZE_KEY)

    @property
    def model_batch_size(self) -> int | None:
        """model_fn's ``params['batch_size']`` (per replica), or None."""
        return self.model_params.get(BATCH_SIZE_KEY)

    def params_for_input_fn(self) -> dict[str, Any]:
        """A fresh, mutable copy of ``input_params`` (input_fn may change it)."""
        return copy.deepcopy(dict(self.input_params))

    def params_for_model_fn(self) -> dict[str, Any]:
        """A fresh, mutable copy of ``model_params``."""
        return copy.deepcopy(dict(self.model_params))
