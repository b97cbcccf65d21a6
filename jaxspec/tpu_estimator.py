"""TPUEstimator: model_fn per replica on a device mesh (``tf.estimator.tpu.TPUEstimator``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from jaxspec.config import InputPipelineConfig, RunConfig
from jaxspec.engine.mesh import make_replica_mesh
from jaxspec.estimator import Estimator
from jaxspec.mode_keys import ModeKeys

BATCH_SIZE_KEY = "batch_size"
USE_TPU_KEY = "use_tpu"


class TPUEstimator(Estimator):
    """An Estimator whose model_fn runs once per replica on a mesh of all devices.

    With ``use_tpu=True`` (the default, as TF) model_fn runs inside ``jax.shard_map``
    over a 1-D ``'replica'`` mesh of every device of every process (TPU, GPU or CPU:
    the name is TF's); features and labels are split on axis 0 and the state is
    replicated. ``params['batch_size']`` is the per-replica batch in model_fn; in
    input_fn it is the per-host batch (PER_HOST_V1, TF's default) or the per-replica
    batch (PER_HOST_V2). ``iterations_per_loop`` steps run in one compiled ``lax.scan``;
    hooks, logging and checkpoints happen between loops. With ``use_tpu=False`` the
    model_fn runs on one device with ``TPUEstimatorSpec.as_estimator_spec()`` semantics
    and ``params['batch_size']`` is the global batch. Exports use the CPU (one device)
    graph; TF's TPU metagraph is not produced.

    Args:
      model_fn, model_dir, config, params, warm_start_from, init_fn: as Estimator
        (``config.tpu_config`` gives iterations_per_loop, num_shards and the input
        pipeline mode).
      use_tpu: run on the replica mesh.
      train_batch_size, eval_batch_size, predict_batch_size: global batch sizes in
        examples; each must divide by the number of replicas.
      batch_axis, eval_on_tpu, export_to_tpu, export_to_cpu, embedding_config_spec,
      export_saved_model_api_version: accepted for compatibility.

    Raises:
      ValueError: params holds ``batch_size``; a batch size is not a positive int or
        does not divide by the replicas; evaluate/predict on the mesh without
        eval_batch_size/predict_batch_size (raised when called).
    """

    def __init__(
        self,
        model_fn: Callable[..., Any] | None = None,
        model_dir: str | None = None,
        config: RunConfig | None = None,
        params: dict[str, Any] | None = None,
        use_tpu: bool = True,
        train_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        predict_batch_size: int | None = None,
        batch_axis: Any = None,
        eval_on_tpu: bool = True,
        export_to_tpu: bool = True,
        export_to_cpu: bool = True,
        warm_start_from: Any = None,
        embedding_config_spec: Any = None,
        export_saved_model_api_version: Any = None,
        init_fn: Callable[..., Any] | None = None,
    ) -> None:
        if params is not None and BATCH_SIZE_KEY in params:
            raise ValueError("params must not hold 'batch_size': TPUEstimator sets it from the batch sizes.")
        super().__init__(model_fn, model_dir, config, params, warm_start_from, init_fn)
        self._use_tpu = use_tpu
        self._batch_sizes = {ModeKeys.TRAIN: train_batch_size, ModeKeys.EVAL: eval_batch_size,
                             ModeKeys.PREDICT: predict_batch_size}
        self._mesh_cache: Mesh | None = None
        pipeline = self._input_pipeline()
        if pipeline not in (InputPipelineConfig.PER_HOST_V1, InputPipelineConfig.PER_HOST_V2):
            raise NotImplementedError(f"input pipeline {pipeline.name} is not supported yet.")
        replicas = self._mesh().size if use_tpu else 1
        for mode, size in self._batch_sizes.items():
            if size is None:
                continue
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"{mode} batch size must be a positive int, got {size!r}.")
            if size % replicas:
                raise ValueError(f"{mode} batch size {size} must be divisible by the {replicas} replicas.")
        if use_tpu and train_batch_size is None:
            raise ValueError("train_batch_size is required when use_tpu=True.")

    def _mesh(self) -> Mesh | None:
        if not self._use_tpu:
            return None
        if self._mesh_cache is None:
            self._mesh_cache = make_replica_mesh(self._config.tpu_config.num_shards)
        return self._mesh_cache

    def _iterations_per_loop(self) -> int:
        return self._config.tpu_config.iterations_per_loop

    def _global_batch_size(self, mode: str) -> int | None:
        size = self._batch_sizes[mode]
        if size is None and self._use_tpu and mode != ModeKeys.TRAIN:
            which = "eval_batch_size" if mode == ModeKeys.EVAL else "predict_batch_size"
            raise ValueError(f"{which} is required to {'evaluate' if mode == ModeKeys.EVAL else 'predict'} on the mesh.")
        return size

    def _input_pipeline(self) -> InputPipelineConfig:
        return self._config.tpu_config.input_pipeline

    def _replicas(self) -> int:
        mesh = self._mesh()
        return 1 if mesh is None else mesh.size

    def _with_batch(self, size: int | None) -> dict[str, Any]:
        params = self.params
        if size is not None:
            params[BATCH_SIZE_KEY] = size
        params[USE_TPU_KEY] = self._use_tpu
        return params

    def _model_params(self, mode: str) -> dict[str, Any]:
        size = self._batch_sizes[mode]
        return self._with_batch(None if size is None else size // self._replicas())

    def _input_params(self, mode: str) -> dict[str, Any]:
        size = self._batch_sizes[mode]
        if size is None:
            return self._with_batch(None)
        if self._use_tpu and self._input_pipeline() == InputPipelineConfig.PER_HOST_V2:
            return self._with_batch(size // self._replicas())
        return self._with_batch(size // jax.process_count())

    def _export_params(self) -> dict[str, Any]:
        params = self._with_batch(self._batch_sizes[ModeKeys.PREDICT])
        params[USE_TPU_KEY] = False
        return params
