"""TPUEstimator: model_fn per replica on a device mesh (``tf.estimator.tpu.TPUEstimator``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
from jax.sharding import Mesh

from jaxspec._checks import check_positive_int
from jaxspec.config.cluster import maybe_initialize
from jaxspec.config.run_config import (
    InputPipelineConfig,
    RunConfig,
    iterations_per_loop_count,
    loop_duration_secs,
)
from jaxspec.config.warm_start_settings import WarmStartSettings
from jaxspec.engine.mesh import make_replica_mesh, num_replicas
from jaxspec.estimators._model_fn import ModelFnSpec, tpu_spec_check
from jaxspec.estimators.estimator import Estimator, PartitionRules
from jaxspec.loop.plan import RunPlan
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import InitFn, ModelFn

BATCH_SIZE_KEY = "batch_size"
CONTEXT_KEY = "context"
USE_TPU_KEY = "use_tpu"
RESERVED_PARAMS_KEYS = (BATCH_SIZE_KEY, CONTEXT_KEY)
#: Input pipeline modes TPUEstimator runs (SLICED is an eval-only mode in TF).
TRAINING_PIPELINES = (
    InputPipelineConfig.PER_SHARD_V1,
    InputPipelineConfig.PER_HOST_V1,
    InputPipelineConfig.PER_HOST_V2,
    InputPipelineConfig.BROADCAST,
)


class TPUEstimator(Estimator):
    """An Estimator whose model_fn runs once per replica on a mesh of all devices.

    With ``use_tpu=True`` (the default, as TF) model_fn runs inside ``jax.shard_map``
    over a 1-D ``'replica'`` mesh of every device of every process (TPU, GPU or CPU:
    the name is TF's); features and labels are split on axis 0 and the state is
    replicated. ``TPUConfig(replica_axis_name='batch')`` renames that axis, so a train
    step written for ``lax.pmean(grads, 'batch')`` runs unchanged (CrossShardOptimizer
    and the heads reduce over whatever the axis is called). With ``TPUConfig(num_cores_per_replica=k)`` the mesh is 2-D,
    ``('replica', 'core')`` of shape ``(devices // k, k)``: model_fn still runs once per
    replica, and XLA partitions it over the replica's k cores, the state laid out by
    ``partition_rules`` (or flax partitioning metadata); see docs/model-parallelism.md. ``params['batch_size']`` is the per-replica batch in model_fn; in
    input_fn it is the per-host batch (PER_HOST_V1, TF's default) or the per-replica
    batch (PER_HOST_V2). ``iterations_per_loop`` steps run in one compiled ``lax.scan``;
    hooks, logging and checkpoints happen between loops. With ``use_tpu=False`` the
    model_fn runs on one device with ``TPUEstimatorSpec.as_estimator_spec()`` semantics
    and ``params['batch_size']`` is the global batch. Exports use the CPU (one device)
    graph; TF's TPU metagraph is not produced.

    Args:
      model_fn, model_dir, params, warm_start_from, init_fn, partition_rules: as
        Estimator (the rules' ``'core'`` axis has num_cores_per_replica devices). model_fn must
        take ``params`` (checked when it is first called: TPUEstimator passes the batch
        size there); params may not hold the reserved keys ``batch_size`` and
        ``context``.
      config: a RunConfig, required (its ``tpu_config`` gives iterations_per_loop,
        num_shards and the input pipeline mode).
      use_tpu: run on the replica mesh.
      train_batch_size, eval_batch_size, predict_batch_size: global batch sizes in
        examples. With use_tpu, train_batch_size is required and each given one must be
        a positive int; divisibility by the replicas is checked when the phase starts
        (ValueError), not at construction, as in TF.
      eval_on_tpu: False lets an EVAL model_fn return a plain EstimatorSpec.
      export_saved_model_api_version: None, 1 or 2.
      batch_axis, export_to_tpu, export_to_cpu, embedding_config_spec: accepted for
        compatibility.

    What model_fn returns is checked per mode (see ``jaxspec.estimators._model_fn.tpu_spec_check``):
    on the mesh an EVAL or PREDICT model_fn must return a TPUEstimatorSpec
    (RuntimeError), and a TRAIN EstimatorSpec may not carry training_chief_hooks
    (ValueError).

    Raises:
      ValueError: config missing or not a RunConfig; params holds a reserved key;
        train_batch_size missing with use_tpu; PER_SHARD_V1 input with
        num_cores_per_replica; a bad export_saved_model_api_version; the device count
        not divisible by num_cores_per_replica (use_tpu only); or as Estimator.
      TypeError: a batch size that is not an int (``1.0`` included) with use_tpu.
      NotImplementedError: SLICED as the training input pipeline.
    """

    def __init__(
        self,
        model_fn: ModelFn | None = None,
        model_dir: str | None = None,
        config: RunConfig | None = None,
        params: dict[str, Any] | None = None,
        use_tpu: bool = True,
        train_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        predict_batch_size: int | None = None,
        batch_axis: object = None,
        eval_on_tpu: bool = True,
        export_to_tpu: bool = True,
        export_to_cpu: bool = True,
        warm_start_from: str | os.PathLike[str] | WarmStartSettings | None = None,
        embedding_config_spec: object = None,
        export_saved_model_api_version: int | None = None,
        init_fn: InitFn | None = None,
        partition_rules: PartitionRules | None = None,
    ) -> None:
        if config is None or not isinstance(config, RunConfig):
            raise ValueError(f"TPUEstimator needs config, a jaxspec.RunConfig; got {type(config).__name__}.")
        reserved = [k for k in RESERVED_PARAMS_KEYS if params is not None and k in params]
        if reserved:
            raise ValueError(
                f"params may not hold {reserved}: TPUEstimator reserves {list(RESERVED_PARAMS_KEYS)}."
            )
        tpu_config = config.tpu_config
        if use_tpu:
            if train_batch_size is None:
                raise ValueError("train_batch_size must be set when use_tpu=True.")
            for name, size in (
                ("train_batch_size", train_batch_size),
                ("eval_batch_size", eval_batch_size),
                ("predict_batch_size", predict_batch_size),
            ):
                if size is not None:
                    check_positive_int(size, name)
            if (
                tpu_config.input_pipeline is InputPipelineConfig.PER_SHARD_V1
                and tpu_config.num_cores_per_replica
            ):
                raise ValueError(
                    "model parallelism (num_cores_per_replica) needs per-host input, not PER_SHARD_V1."
                )
        if export_saved_model_api_version not in (None, 1, 2):
            raise ValueError(
                f"export_saved_model_api_version must be 1 or 2, got {export_saved_model_api_version!r}."
            )
        if tpu_config.input_pipeline not in TRAINING_PIPELINES:
            raise NotImplementedError(
                f"per_host_input_for_training={tpu_config.input_pipeline.name} is not supported; use one of "
                f"{[p.name for p in TRAINING_PIPELINES]}."
            )
        super().__init__(model_fn, model_dir, config, params, warm_start_from, init_fn, partition_rules)
        self._use_tpu = use_tpu
        self._eval_on_tpu = eval_on_tpu
        self._batch_sizes = {
            ModeKeys.TRAIN: train_batch_size,
            ModeKeys.EVAL: eval_batch_size,
            ModeKeys.PREDICT: predict_batch_size,
        }
        self._mesh_cache: Mesh | None = None
        if use_tpu and (tpu_config.num_cores_per_replica or 1) > 1:
            self._mesh()  # a device count not divisible by num_cores_per_replica fails here

    _model_fn_needs_params = True

    def _check_spec(self, spec: object, mode: str, params: dict[str, Any]) -> ModelFnSpec:
        """TPUEstimator's rules (``tpu_spec_check``); ``params['use_tpu']`` tells whether
        this call runs on the mesh (False in exports, which use the one-device graph)."""
        on_mesh = bool(params.get(USE_TPU_KEY, self._use_tpu)) if isinstance(params, dict) else self._use_tpu
        return tpu_spec_check(spec, mode, on_mesh, self._eval_on_tpu)

    def _check_batch_divisible(self, mode: str, size: int | None) -> None:
        """On the mesh a global batch must split evenly over the replicas (ValueError
        naming the batch size); BROADCAST input is exempt, as in TF. Building the mesh
        here also raises ValueError when num_shards exceeds the devices."""
        if not self._use_tpu or size is None or self._input_pipeline() is InputPipelineConfig.BROADCAST:
            return
        replicas = self._replicas()
        if size % replicas:
            which = {ModeKeys.TRAIN: "train", ModeKeys.EVAL: "eval", ModeKeys.PREDICT: "predict"}[mode]
            raise ValueError(
                f"{which}_batch_size ({size}) must be divisible by the number of replicas ({replicas})."
            )

    def _mesh(self) -> Mesh | None:
        if not self._use_tpu:
            return None
        if self._mesh_cache is None:
            maybe_initialize(self._config.cluster, self._config.heartbeat_timeout_secs)  # before the mesh
            tpu_config = self._config.tpu_config
            self._mesh_cache = make_replica_mesh(
                tpu_config.num_shards, tpu_config.num_cores_per_replica, tpu_config.replica_axis_name
            )
        return self._mesh_cache

    def _global_batch_size(self, mode: str) -> int | None:
        size = self._batch_sizes[mode]
        if size is None and self._use_tpu and mode != ModeKeys.TRAIN:
            which = "eval_batch_size" if mode == ModeKeys.EVAL else "predict_batch_size"
            raise ValueError(
                f"{which} is required to {'evaluate' if mode == ModeKeys.EVAL else 'predict'} on the mesh."
            )
        self._check_batch_divisible(mode, size)
        return size

    def _input_pipeline(self) -> InputPipelineConfig:
        return self._config.tpu_config.input_pipeline

    def _replicas(self) -> int:
        return num_replicas(self._mesh())

    def _with_batch(self, size: int | None) -> dict[str, Any]:
        params = self.params
        if size is not None:
            params[BATCH_SIZE_KEY] = size
        params[USE_TPU_KEY] = self._use_tpu
        return params

    def _model_params(self, mode: str) -> dict[str, Any]:
        size = self._batch_sizes[mode]
        if size is not None and self._use_tpu and self._input_pipeline() is InputPipelineConfig.BROADCAST:
            return self._with_batch(size)  # every replica sees the whole batch
        return self._with_batch(None if size is None else size // self._replicas())

    def _input_params(self, mode: str) -> dict[str, Any]:
        size = self._batch_sizes[mode]
        if size is None:
            return self._with_batch(None)
        pipeline = self._input_pipeline() if self._use_tpu else InputPipelineConfig.PER_HOST_V1
        if pipeline in (InputPipelineConfig.PER_HOST_V2, InputPipelineConfig.PER_SHARD_V1):
            return self._with_batch(size // self._replicas())  # one input batch per replica
        if pipeline is InputPipelineConfig.BROADCAST:
            return self._with_batch(size)  # the whole batch, sent to every replica
        return self._with_batch(size // jax.process_count())  # PER_HOST_V1: one per host

    def _export_params(self) -> dict[str, Any]:
        params = self._with_batch(self._batch_sizes[ModeKeys.PREDICT])
        params[USE_TPU_KEY] = False
        return params

    def _run_plan(self, mode: str, for_export: bool = False) -> RunPlan:
        """TPUEstimator's plan: on the mesh (``use_tpu``) with ``iterations_per_loop``
        steps per loop, the input pipeline's batch sizes and host_call's cadence; exports
        run off the mesh with ``params['use_tpu'] = False`` (the CPU graph)."""
        plan = super()._run_plan(mode, for_export)
        if for_export:
            params = self._export_params()
            return dataclasses.replace(plan, input_params=params, model_params=params)
        tpu_config = self._config.tpu_config
        return dataclasses.replace(
            plan,
            mesh=self._mesh(),
            iterations_per_loop=iterations_per_loop_count(tpu_config),
            loop_duration_secs=loop_duration_secs(tpu_config),
            input_pipeline=self._input_pipeline(),
            global_batch_size=self._global_batch_size(mode),
            input_params=self._input_params(mode),
            model_params=self._model_params(mode),
            host_call_every_n_steps=tpu_config.experimental_host_call_every_n_steps,
        )
