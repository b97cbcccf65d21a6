"""RunConfig, TPUConfig and InputPipelineConfig (tf.estimator / tf.estimator.tpu names)."""

from __future__ import annotations

import copy
import enum
import logging
from typing import Any

_USE_DEFAULT = object()
_log = logging.getLogger("jaxspec")


class InputPipelineConfig(enum.IntEnum):
    """How input_fn is called per host (``tf.estimator.tpu.InputPipelineConfig``).

    PER_HOST_V1: once per host; ``params['batch_size']`` is the global batch over the
    number of hosts, and each host batch is split across its local replicas.
    PER_HOST_V2: once per host; ``params['batch_size']`` is the per-replica batch, and the
    host takes one batch per local replica each step.
    PER_SHARD_V1 and BROADCAST are accepted; they are built in a later version and raise
    NotImplementedError when used.
    """

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


class TPUConfig:
    """Mesh and loop settings of TPUEstimator (``tf.estimator.tpu.TPUConfig``).

    Args:
      iterations_per_loop: steps run in one compiled ``lax.scan`` (one dispatch) per loop;
        hooks, host-side logging and checkpoints happen between loops. Positive int.
      num_shards: number of replicas; None means every device of every process.
      num_cores_per_replica: model parallelism; only None/1 is supported (ValueError).
      per_host_input_for_training: True or PER_HOST_V1 (TF's default), PER_HOST_V2,
        False or PER_SHARD_V1, BROADCAST.
      eval_training_input_configuration: accepted; eval and predict use the same
        pipeline mode as training here.
      Other TF arguments (tpu_job_name, initial_infeed_sleep_secs, input_partition_dims,
      experimental_host_call_every_n_steps) are accepted and stored.

    Raises:
      ValueError: iterations_per_loop or num_shards is not a positive int.
    """

    def __init__(
        self,
        iterations_per_loop: int = 2,
        num_shards: int | None = None,
        num_cores_per_replica: int | None = None,
        per_host_input_for_training: Any = True,
        tpu_job_name: str | None = None,
        initial_infeed_sleep_secs: float | None = None,
        input_partition_dims: Any = None,
        eval_training_input_configuration: Any = InputPipelineConfig.PER_HOST_V1,
        experimental_host_call_every_n_steps: int = 1,
    ) -> None:
        if not isinstance(iterations_per_loop, int) or iterations_per_loop <= 0:
            raise ValueError(f"TPUConfig: iterations_per_loop must be a positive int, got {iterations_per_loop!r}.")
        if num_shards is not None and (not isinstance(num_shards, int) or num_shards <= 0):
            raise ValueError(f"TPUConfig: num_shards must be a positive int or None, got {num_shards!r}.")
        if num_cores_per_replica not in (None, 1):
            raise ValueError("TPUConfig: num_cores_per_replica > 1 (model parallelism) is not supported.")
        self.iterations_per_loop = iterations_per_loop
        self.num_shards = num_shards
        self.num_cores_per_replica = num_cores_per_replica
        self.per_host_input_for_training = per_host_input_for_training
        self.tpu_job_name = tpu_job_name
        self.initial_infeed_sleep_secs = initial_infeed_sleep_secs
        self.input_partition_dims = input_partition_dims
        self.eval_training_input_configuration = eval_training_input_configuration
        self.experimental_host_call_every_n_steps = experimental_host_call_every_n_steps

    @property
    def input_pipeline(self) -> InputPipelineConfig:
        """``per_host_input_for_training`` as an InputPipelineConfig value."""
        value = self.per_host_input_for_training
        if value is True:
            return InputPipelineConfig.PER_HOST_V1
        if value is False:
            return InputPipelineConfig.PER_SHARD_V1
        return InputPipelineConfig(value)


class RunConfig:
    """Where and how an Estimator runs (``tf.estimator.RunConfig`` and
    ``tf.estimator.tpu.RunConfig``, which adds ``tpu_config``).

    Args:
      model_dir: directory for checkpoints, event files and exports (str or None).
      tf_random_seed: int seed of the ``rng`` key passed to model_fn/init_fn (0 if None).
      save_summary_steps: steps between ``loss``/``global_step/sec`` summaries (100).
      save_checkpoints_steps / save_checkpoints_secs: at most one may be set; with
        neither, a checkpoint every 600 seconds (TF's default). None/None disables
        periodic saves (the final step is always saved).
      keep_checkpoint_max: checkpoints kept (5); None or 0 keeps all.
      keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours.
      log_step_count_steps: steps between ``loss = ..., step = ...`` log lines (100).
      tpu_config: a TPUConfig (TPUEstimator; a default one when None).
      Other TF arguments (session_config, train_distribute, device_fn, protocol,
      eval_distribute, experimental_distribute, experimental_max_worker_delay_secs,
      session_creation_timeout_secs, checkpoint_save_graph_def, master,
      evaluation_master, cluster) are accepted and stored; JAX has no use for them.

    Raises:
      ValueError: both save_checkpoints_steps and save_checkpoints_secs are set, or a
        step/second count is negative.
      TypeError: tpu_config is not a TPUConfig.
    """

    def __init__(
        self,
        model_dir: str | None = None,
        tf_random_seed: int | None = None,
        save_summary_steps: int = 100,
        save_checkpoints_steps: Any = _USE_DEFAULT,
        save_checkpoints_secs: Any = _USE_DEFAULT,
        session_config: Any = None,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: float = 10000,
        log_step_count_steps: int = 100,
        train_distribute: Any = None,
        device_fn: Any = None,
        protocol: Any = None,
        eval_distribute: Any = None,
        experimental_distribute: Any = None,
        experimental_max_worker_delay_secs: Any = None,
        session_creation_timeout_secs: int = 7200,
        checkpoint_save_graph_def: bool = True,
        tpu_config: TPUConfig | None = None,
        evaluation_master: Any = None,
        master: Any = None,
        cluster: Any = None,
    ) -> None:
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        else:
            save_checkpoints_steps = None if save_checkpoints_steps is _USE_DEFAULT else save_checkpoints_steps
            save_checkpoints_secs = None if save_checkpoints_secs is _USE_DEFAULT else save_checkpoints_secs
        if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError("RunConfig: set save_checkpoints_steps or save_checkpoints_secs, not both.")
        for field, value in (
            ("save_checkpoints_steps", save_checkpoints_steps),
            ("save_checkpoints_secs", save_checkpoints_secs),
            ("save_summary_steps", save_summary_steps),
            ("log_step_count_steps", log_step_count_steps),
        ):
            if value is not None and value < 0:
                raise ValueError(f"RunConfig: {field} must be >= 0, got {value!r}.")
        if tpu_config is not None and not isinstance(tpu_config, TPUConfig):
            raise TypeError(f"RunConfig: tpu_config must be a TPUConfig, got {type(tpu_config).__name__}.")
        self.model_dir = model_dir or None
        self.tf_random_seed = tf_random_seed
        self.save_summary_steps = save_summary_steps
        self.save_checkpoints_steps = save_checkpoints_steps
        self.save_checkpoints_secs = save_checkpoints_secs
        self.session_config = session_config
        self.keep_checkpoint_max = keep_checkpoint_max
        self.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self.log_step_count_steps = log_step_count_steps
        self.train_distribute = train_distribute
        self.device_fn = device_fn
        self.protocol = protocol
        self.eval_distribute = eval_distribute
        self.experimental_distribute = experimental_distribute
        self.experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self.session_creation_timeout_secs = session_creation_timeout_secs
        self.checkpoint_save_graph_def = checkpoint_save_graph_def
        self.tpu_config = tpu_config or TPUConfig()
        self.evaluation_master = evaluation_master
        self.master = master
        self.cluster = cluster

    @property
    def is_chief(self) -> bool:
        """True on JAX process 0 (the process that writes summaries and exports)."""
        import jax

        return jax.process_index() == 0

    @property
    def num_worker_replicas(self) -> int:
        """Number of JAX processes."""
        import jax

        return jax.process_count()

    def replace(self, **kwargs: Any) -> RunConfig:
        """A copy with the given fields replaced (``RunConfig.replace``).

        Raises:
          ValueError: a name is not a RunConfig field.
        """
        new = copy.copy(self)
        for key, value in kwargs.items():
            if not hasattr(new, key) or key.startswith("_"):
                raise ValueError(f"RunConfig.replace: {key!r} is not a RunConfig field.")
            setattr(new, key, value)
        if new.save_checkpoints_steps is not None and new.save_checkpoints_secs is not None:
            if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" not in kwargs:
                new.save_checkpoints_secs = None
            elif "save_checkpoints_secs" in kwargs and "save_checkpoints_steps" not in kwargs:
                new.save_checkpoints_steps = None
            else:
                raise ValueError("RunConfig: set save_checkpoints_steps or save_checkpoints_secs, not both.")
        return new
