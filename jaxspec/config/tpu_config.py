"""TPUConfig and InputPipelineConfig (``tf.estimator.tpu.TPUConfig``,
``tf.estimator.tpu.InputPipelineConfig``) and the reading of ``iterations_per_loop``:
fields, defaults and validation follow TF's, the exception types are TensorFlow's, the
messages jaxspec's. ``jaxspec.config.run_config`` re-exports them beside RunConfig.
"""

from __future__ import annotations

import collections
import enum
import math
import re
from typing import Any, NamedTuple

from jaxspec._checks import check_positive_int


class InputPipelineConfig(enum.IntEnum):
    """How input_fn is called per host (``tf.estimator.tpu.InputPipelineConfig``).

    PER_HOST_V1: once per host; ``params['batch_size']`` is the global batch over the
    number of hosts, and each host batch is split across its local replicas.
    PER_HOST_V2: once per host; ``params['batch_size']`` is the per-replica batch, and the
    host takes one batch per local replica each step.
    PER_SHARD_V1 (``per_host_input_for_training=False``), BROADCAST and SLICED are valid
    configuration values; TPUEstimator raises NotImplementedError for the modes its input
    pipeline does not build yet.
    """

    PER_SHARD_V1 = 1
    PER_HOST_V1 = 2
    PER_HOST_V2 = 3
    BROADCAST = 4
    SLICED = 5


class IterationsPerLoopCounter(NamedTuple):
    """A parsed ``iterations_per_loop``: ``value`` steps (unit ``'count'``) or ``value``
    seconds (unit ``'seconds'``)."""

    value: int
    unit: str


_ITERATIONS_RE = re.compile(r"^(?P<value>[1-9]\d*)(?P<suffix>[smh]?)$")


def parse_iterations_per_loop(iterations_per_loop: Any) -> IterationsPerLoopCounter:
    """Parse ``iterations_per_loop``: a positive int (a step count) or a string
    ``'<N>s'``, ``'<N>m'``, ``'<N>h'`` (a duration, returned in seconds), as TF does.

    Raises:
      ValueError: anything else (0, negatives, ``'-1h'``, floats, booleans); the
        message names iterations_per_loop.
    """
    text = str(iterations_per_loop)
    match = None if isinstance(iterations_per_loop, bool) else _ITERATIONS_RE.match(text)
    if match is None:
        raise ValueError(
            "iterations_per_loop must be a positive integer step count or a positive duration "
            f"'<N>s', '<N>m' or '<N>h'; got {iterations_per_loop!r}."
        )
    value = int(match.group("value"))
    suffix = match.group("suffix")
    if not suffix:
        return IterationsPerLoopCounter(value, "count")
    return IterationsPerLoopCounter(value * {"s": 1, "m": 60, "h": 3600}[suffix], "seconds")


def iterations_per_loop_count(tpu_config: TPUConfig) -> int:
    """Steps per compiled loop for ``tpu_config``.

    A count is used as given. A duration (``'300s'``) sizes training loops by time: the
    first two loops run one step each, the second is timed, and later loops run as many
    steps as fit in the duration (one more compilation); eval and predict loops run one
    step. Returns 1 for a duration: the training loop resizes itself.
    """
    parsed = tpu_config.parsed_iterations_per_loop
    return parsed.value if parsed.unit == "count" else 1


def loop_duration_secs(tpu_config: TPUConfig | None) -> float | None:
    """The seconds a training loop should last when iterations_per_loop is a duration."""
    if tpu_config is None:
        return None
    parsed = tpu_config.parsed_iterations_per_loop
    return float(parsed.value) if parsed.unit == "seconds" else None


_CORES_PER_REPLICA = (1, 2, 4, 8, 16, 32, 64, 128)


def _check_partition_dims(entry: Any, cores: int) -> None:
    """One entry of input_partition_dims (for features or labels): None, a list of
    positive ints per tensor dimension (product = num_cores_per_replica, as TF; jaxspec's
    one 'core' axis splits a single dimension, never the batch), or a dict of those.

    Raises:
      ValueError: naming the entry.
    """
    if entry is None:
        return
    if isinstance(entry, dict):
        for value in entry.values():
            _check_partition_dims(value, cores)
        return
    dims = list(entry)
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ValueError(f"TPUConfig: input_partition_dims entry {entry!r} must list positive ints.")
    if math.prod(dims) != cores:
        raise ValueError(
            f"TPUConfig: input_partition_dims entry {entry!r} splits into {math.prod(dims)} parts; "
            f"num_cores_per_replica is {cores}."
        )
    if dims[0] != 1 or sum(d > 1 for d in dims) > 1:
        raise ValueError(
            f"TPUConfig: input_partition_dims entry {entry!r}: jaxspec splits one non-batch dimension "
            "over the cores of a replica (the batch dimension is split over replicas)."
        )


def _pipeline(value: Any) -> InputPipelineConfig:
    if value is True:
        return InputPipelineConfig.PER_HOST_V1
    if value is False:
        return InputPipelineConfig.PER_SHARD_V1
    try:
        return InputPipelineConfig(value)
    except ValueError:
        raise ValueError(
            "TPUConfig: per_host_input_for_training must be True, False or an InputPipelineConfig "
            f"value {[m.name for m in InputPipelineConfig]}, got {value!r}."
        ) from None


class TPUConfig(
    collections.namedtuple(  # the fields as a literal list, which type checkers read
        "TPUConfig",
        [
            "iterations_per_loop",
            "num_shards",
            "num_cores_per_replica",
            "per_host_input_for_training",
            "tpu_job_name",
            "initial_infeed_sleep_secs",
            "input_partition_dims",
            "eval_training_input_configuration",
            "experimental_host_call_every_n_steps",
            "experimental_allow_per_host_v2_parallel_get_next",
            "experimental_feed_hook",
            "replica_axis_name",
        ],
    )
):
    """Mesh and loop settings of TPUEstimator (``tf.estimator.tpu.TPUConfig``), an
    immutable namedtuple as in TF.

    Args:
      iterations_per_loop: steps run in one compiled ``lax.scan`` (one dispatch) per
        loop; a positive int, or a duration ``'300s'``/``'1m'``/``'1h'`` (kept as given;
        see ``parsed_iterations_per_loop``). Default 2.
      num_shards: number of replicas; None means every device of every process.
      num_cores_per_replica: model parallelism: None or a power of two up to 128 (TPUEstimator
        runs only 1 and raises NotImplementedError for more).
      per_host_input_for_training: True (PER_HOST_V1, TF's default), False (PER_SHARD_V1)
        or an InputPipelineConfig value; stored as an InputPipelineConfig.
      tpu_job_name, initial_infeed_sleep_secs (positive int if set), input_partition_dims
        (one or two entries, PER_HOST_V2 and num_cores_per_replica required),
        eval_training_input_configuration (PER_HOST_V1 or SLICED),
        experimental_host_call_every_n_steps (positive int),
        experimental_allow_per_host_v2_parallel_get_next, experimental_feed_hook:
        validated as TF does and stored.

    Raises:
      ValueError: iterations_per_loop is not a positive count or duration;
        num_shards <= 0; num_cores_per_replica not a power of two in [1, 128];
        input_partition_dims or eval_training_input_configuration invalid.
        replica_axis_name is not a non-empty str other than ``'core'``.
      TypeError: num_shards, initial_infeed_sleep_secs or
        experimental_host_call_every_n_steps is not an int.
    """

    __slots__ = ()

    def __new__(
        cls,
        iterations_per_loop: int | str = 2,
        num_shards: int | None = None,
        num_cores_per_replica: int | None = None,
        per_host_input_for_training: Any = True,
        tpu_job_name: str | None = None,
        initial_infeed_sleep_secs: int | None = None,
        input_partition_dims: Any = None,
        eval_training_input_configuration: Any = InputPipelineConfig.PER_HOST_V1,
        experimental_host_call_every_n_steps: int = 1,
        experimental_allow_per_host_v2_parallel_get_next: bool = False,
        experimental_feed_hook: Any = None,
        replica_axis_name: str = "replica",
    ) -> TPUConfig:
        if not isinstance(replica_axis_name, str) or not replica_axis_name or replica_axis_name == "core":
            raise ValueError(
                "TPUConfig: replica_axis_name must be a non-empty name other than 'core' "
                f"(the model-parallel axis), got {replica_axis_name!r}."
            )
        parse_iterations_per_loop(iterations_per_loop)
        if num_shards is not None:
            check_positive_int(num_shards, "TPUConfig.num_shards")
        pipeline = _pipeline(per_host_input_for_training)
        if input_partition_dims is not None:
            if len(input_partition_dims) not in (1, 2):
                raise ValueError(
                    f"TPUConfig: input_partition_dims must have one or two entries, got {len(input_partition_dims)}."
                )
            if pipeline is not InputPipelineConfig.PER_HOST_V2:
                raise ValueError(
                    "TPUConfig: input_partition_dims needs per_host_input_for_training=PER_HOST_V2."
                )
            if num_cores_per_replica is None:
                raise ValueError("TPUConfig: input_partition_dims needs num_cores_per_replica to be set.")
            for entry in input_partition_dims:
                _check_partition_dims(entry, num_cores_per_replica)
        if num_cores_per_replica is not None and num_cores_per_replica not in _CORES_PER_REPLICA:
            raise ValueError(
                f"TPUConfig: num_cores_per_replica must be one of {list(_CORES_PER_REPLICA)}, "
                f"got {num_cores_per_replica!r}."
            )
        if eval_training_input_configuration not in (
            InputPipelineConfig.PER_HOST_V1,
            InputPipelineConfig.SLICED,
        ):
            raise ValueError(
                "TPUConfig: eval_training_input_configuration must be PER_HOST_V1 or SLICED, "
                f"got {eval_training_input_configuration!r}."
            )
        if initial_infeed_sleep_secs:
            check_positive_int(initial_infeed_sleep_secs, "TPUConfig.initial_infeed_sleep_secs")
        check_positive_int(
            experimental_host_call_every_n_steps, "TPUConfig.experimental_host_call_every_n_steps"
        )
        return super().__new__(
            cls,
            iterations_per_loop,
            num_shards,
            num_cores_per_replica,
            pipeline,
            tpu_job_name,
            initial_infeed_sleep_secs,
            input_partition_dims,
            InputPipelineConfig(eval_training_input_configuration),
            experimental_host_call_every_n_steps,
            experimental_allow_per_host_v2_parallel_get_next,
            experimental_feed_hook,
            replica_axis_name,
        )

    @property
    def input_pipeline(self) -> InputPipelineConfig:
        """``per_host_input_for_training`` as an InputPipelineConfig value."""
        return self.per_host_input_for_training

    @property
    def parsed_iterations_per_loop(self) -> IterationsPerLoopCounter:
        """``iterations_per_loop`` parsed: ``(N, 'count')`` or ``(seconds, 'seconds')``."""
        return parse_iterations_per_loop(self.iterations_per_loop)
