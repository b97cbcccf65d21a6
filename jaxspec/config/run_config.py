"""RunConfig, TPUConfig and InputPipelineConfig (tf.estimator / tf.estimator.tpu names).

Fields, defaults and validation follow ``tf.estimator.RunConfig``,
``tf.estimator.tpu.RunConfig`` (merged into RunConfig: ``tpu_config``, ``master``,
``evaluation_master``, ``cluster``) and ``tf.estimator.tpu.TPUConfig``; the exception
types are TensorFlow's, the messages jaxspec's.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import signal
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from jaxspec._checks import is_int, type_name
from jaxspec._fn_args import fn_arg_names
from jaxspec.config.tpu_config import (  # noqa: F401  (re-exported: they live in jaxspec.config.tpu_config)
    InputPipelineConfig,
    IterationsPerLoopCounter,
    TPUConfig,
    iterations_per_loop_count,
    loop_duration_secs,
    parse_iterations_per_loop,
)

_USE_DEFAULT: Any = object()

#: The RunConfig fields ``replace()`` may change (tf.estimator's list, plus tpu_config).
REPLACEABLE_FIELDS = (
    "model_dir",
    "tf_random_seed",
    "save_summary_steps",
    "save_checkpoints_steps",
    "save_checkpoints_secs",
    "session_config",
    "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours",
    "log_step_count_steps",
    "train_distribute",
    "device_fn",
    "protocol",
    "eval_distribute",
    "experimental_distribute",
    "experimental_max_worker_delay_secs",
    "session_creation_timeout_secs",
    "checkpoint_save_graph_def",
    "tpu_config",
    "steps_per_execution",
    "export_jax_artifact",
    "peak_flops_per_device",
    "heartbeat_timeout_secs",
    "preemption_signals",
    "hang_timeout_secs",
    "exit_on_hang",
    "local_checkpoint_dir",
    "local_save_checkpoints_steps",
)
_OTHER_FIELDS = ("evaluation_master", "master", "cluster")


def _check_number(name: str, value: Any, ok: Callable[[Any], bool], rule: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"RunConfig: {name} must be a number, got {type_name(value)} ({value!r}).")
    if not ok(value):
        raise ValueError(f"RunConfig: {name} must be {rule}, got {value!r}.")


def _validate(config: RunConfig) -> None:
    """tf.estimator's ``_validate_properties``: each field's rule, None always allowed."""
    if config.model_dir is not None and (not isinstance(config.model_dir, str) or not config.model_dir):
        raise ValueError(f"RunConfig: model_dir must be a non-empty path, got {config.model_dir!r}.")
    for name, ok, rule in (
        ("save_summary_steps", lambda v: v >= 0, ">= 0"),
        ("save_checkpoints_steps", lambda v: v >= 0, ">= 0"),
        ("save_checkpoints_secs", lambda v: v >= 0, ">= 0"),
        ("keep_checkpoint_max", lambda v: v >= 0, ">= 0"),
        ("keep_checkpoint_every_n_hours", lambda v: v > 0, "> 0"),
        ("log_step_count_steps", lambda v: v > 0, "> 0 (None turns step logging off)"),
        ("session_creation_timeout_secs", lambda v: v > 0, "> 0"),
        ("peak_flops_per_device", lambda v: v > 0, "> 0"),
        ("heartbeat_timeout_secs", lambda v: v > 0, "> 0"),
        ("hang_timeout_secs", lambda v: v > 0, "> 0 (None turns the watchdog off)"),
    ):
        _check_number(name, getattr(config, name), ok, rule)
    for name in ("tf_random_seed", "experimental_max_worker_delay_secs"):
        value = getattr(config, name)
        if value is not None and not is_int(value):
            raise ValueError(f"RunConfig: {name} must be an integer, got {value!r}.")
    device_fn = config.device_fn
    if device_fn is not None and (not callable(device_fn) or set(fn_arg_names(device_fn)) != {"op"}):
        raise ValueError("RunConfig: device_fn must be callable with exactly one argument, 'op'.")
    if config.protocol not in (None, "grpc", "grpc+verbs"):
        raise ValueError(
            f"RunConfig: protocol must be None, 'grpc' or 'grpc+verbs', got {config.protocol!r}."
        )
    spe = config.steps_per_execution
    if spe != "auto" and (not is_int(spe) or spe < 1):
        raise ValueError(f"RunConfig: steps_per_execution must be 'auto' or an int >= 1, got {spe!r}.")
    if not isinstance(config.export_jax_artifact, bool):
        raise TypeError(
            f"RunConfig: export_jax_artifact must be a bool, got {type_name(config.export_jax_artifact)}."
        )
    _validate_faults(config)
    if config.tpu_config is not None and not isinstance(config.tpu_config, TPUConfig):
        raise TypeError(f"RunConfig: tpu_config must be a TPUConfig, got {type_name(config.tpu_config)}.")


def _validate_faults(config: RunConfig) -> None:
    """The launch and fault fields: preemption signals, the hang exit, the local tier."""
    signals = config.preemption_signals
    if not isinstance(signals, tuple | list) or not signals:
        raise TypeError(
            f"RunConfig: preemption_signals must be a non-empty tuple of signals, got {signals!r}."
        )
    valid = set(signal.valid_signals())
    for sig in signals:
        if isinstance(sig, bool) or not is_int(sig) or sig not in valid:
            raise ValueError(f"RunConfig: preemption_signals holds {sig!r}, which is not a signal number.")
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(
                f"RunConfig: preemption_signals cannot hold {signal.Signals(sig).name}: it cannot be caught."
            )
    if not isinstance(config.exit_on_hang, bool):
        raise TypeError(f"RunConfig: exit_on_hang must be a bool, got {type_name(config.exit_on_hang)}.")
    if config.exit_on_hang and config.hang_timeout_secs is None:
        raise ValueError("RunConfig: exit_on_hang needs hang_timeout_secs.")
    heartbeat = config.heartbeat_timeout_secs
    if heartbeat is None or (isinstance(heartbeat, numbers.Real) and not math.isfinite(heartbeat)):
        raise ValueError(
            f"RunConfig: heartbeat_timeout_secs must be a finite number of seconds > 0, got {heartbeat!r}."
        )
    _check_cluster(config.cluster)
    local, every = config.local_checkpoint_dir, config.local_save_checkpoints_steps
    if local is not None and (not isinstance(local, str) or not local):
        raise ValueError(f"RunConfig: local_checkpoint_dir must be a non-empty path, got {local!r}.")
    if local is not None:
        _check_writable_dir(local)
    if every is not None and (isinstance(every, bool) or not is_int(every) or every < 1):
        raise ValueError(f"RunConfig: local_save_checkpoints_steps must be an int >= 1, got {every!r}.")
    if (local is None) != (every is None):
        raise ValueError(
            "RunConfig: local_checkpoint_dir and local_save_checkpoints_steps are set together "
            f"(got {local!r} and {every!r})."
        )


def _check_cluster(cluster: Any) -> None:
    """``cluster`` is None, a ``jaxspec.config.cluster.Cluster``, a dict of its arguments,
    or a ClusterResolver (anything with a ``cluster_spec`` method)."""
    from jaxspec.config.cluster import Cluster

    if isinstance(cluster, dict):
        try:
            Cluster(**cluster)
        except (TypeError, ValueError) as err:
            raise type(err)(f"RunConfig: cluster {cluster!r} does not describe a Cluster: {err}") from err
        return
    if cluster is None or isinstance(cluster, Cluster):
        return
    if not isinstance(cluster, type) and callable(getattr(cluster, "cluster_spec", None)):
        return
    raise TypeError(
        "RunConfig: cluster must be a jaxspec Cluster, a dict of its arguments or a ClusterResolver "
        f"(an object with cluster_spec()), got {type_name(cluster)}."
    )


def _check_writable_dir(path: str) -> None:
    """A local checkpoint directory that can never be written is refused when the
    RunConfig is made, before any model_dir is created: an existing non-directory, or a
    missing directory whose nearest existing parent is not a writable directory."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"RunConfig: local_checkpoint_dir {path!r} exists and is not a directory.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"RunConfig: local_checkpoint_dir {path!r} is not writable by this process.")
        return
    if "://" in path:  # a URL is not node-local, but it is not ours to probe here
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"RunConfig: local_checkpoint_dir {path!r} cannot be created: {parent!r} is not a "
            "writable directory."
        )


_T = TypeVar("_T")


class _Field(Generic[_T]):
    """A read-only RunConfig field, declared with its type in the class body and stored
    as ``_<name>`` on the instance (a data descriptor, like a property: assigning or
    deleting it raises AttributeError)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self.__doc__ = f"The ``{name}`` field (read-only; ``replace()`` makes a changed copy)."

    @overload
    def __get__(self, obj: None, owner: type) -> _Field[_T]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> _T: ...

    def __get__(self, obj: object | None, owner: type) -> _Field[_T] | _T:
        return self if obj is None else getattr(obj, "_" + self._name)

    def __set__(self, obj: object, value: _T) -> None:
        raise AttributeError(f"RunConfig.{self._name} is read-only; use config.replace({self._name}=...).")


def _path(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _signals(value: Any) -> Any:
    """A list of signals as a tuple (the stored form); anything else as given, for
    ``_validate`` to refuse."""
    return tuple(value) if isinstance(value, list) else value


class RunConfig:
    """Where and how an Estimator runs (``tf.estimator.RunConfig`` and
    ``tf.estimator.tpu.RunConfig``). Fields are read-only attributes; ``replace()``
    returns a changed copy, as in TF.

    Args:
      model_dir: directory (str or path-like) for checkpoints, event files and exports;
        None lets the Estimator choose (an empty string is a ValueError, as in TF).
      tf_random_seed: int seed of the ``rng`` key passed to model_fn/init_fn (0 if None).
      save_summary_steps: steps between ``loss`` summaries (100); 0 or None: none.
      save_checkpoints_steps / save_checkpoints_secs: at most one may be set; with
        neither given, a checkpoint every 600 seconds (TF's default); both given as None
        turns periodic saves off (the final step is always saved).
      keep_checkpoint_max: checkpoints kept (5); None or 0 keeps all.
      keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours (10000).
      log_step_count_steps: steps between ``loss = ..., step = ...`` log lines (100);
        None turns them off.
      session_creation_timeout_secs: > 0 (7200); stored.
      device_fn: None or a callable of one argument ``op``; stored (JAX places arrays
        itself).
      protocol: None, ``'grpc'`` or ``'grpc+verbs'``; stored.
      tpu_config: a TPUConfig (a default one when None).
      master / evaluation_master / cluster: stored (evaluation_master defaults to master);
        master and cluster may not both be set.
      session_config, train_distribute, eval_distribute, experimental_distribute,
      experimental_max_worker_delay_secs (int), checkpoint_save_graph_def: stored; JAX has
      no use for them.
      steps_per_execution: (a JAX addition, named after Keras' ``compile`` argument)
        the most training or evaluation steps one compiled loop runs where each run is
        one step (a plain Estimator; TPUEstimator with ``iterations_per_loop=1``).
        ``'auto'`` (default): the steps between the ones any hook needs run as one loop
        (up to 1000 steps and 64 MiB of stacked input), hooks still seeing the steps
        they ask for; ``1``: one step per dispatch, as tf.estimator; ``N``: at most N
        steps per loop. TPUEstimator's ``iterations_per_loop > 1`` is not affected.
      export_jax_artifact: (a JAX addition) bool, False: whether ``export_saved_model``
        and ``experimental_export_all_saved_models`` (and so the exporters of
        ``train_and_evaluate``) also write the TF-free ``jax/`` artifact when their
        ``jax_artifact`` argument is not given (``jaxspec.export.load_serving``).
      peak_flops_per_device: (a JAX addition) FLOP/s one device can do at best (a
        number > 0), for the ``perf/mfu`` training summary; None (default): the bf16
        dense peak of a known device kind (``jaxspec.loop_cost.PEAK_BF16_FLOPS``: TPU
        v4/v5e/v5p/v6e, A100, H100, H200), and no ``perf/mfu`` on CPU or other kinds.
      heartbeat_timeout_secs: (a JAX addition) seconds, > 0 (100, JAX's default): once a
        process of a multi-process run has been silent this long (sooner when its
        connection closes), the others stop during ``train`` with an ERROR naming it and
        exit with status 75, within this bound plus 5 s (``docs/cluster.md``, "What
        failures look like").
      preemption_signals: (a JAX addition) tuple of signal numbers
        (``(signal.SIGTERM,)``): each one received during ``train`` saves a checkpoint at
        the next step that can be reached and exits with status 143, as a SIGTERM does
        (add ``signal.SIGUSR1`` for Slurm's ``--signal=USR1@60``).
      hang_timeout_secs: (a JAX addition) seconds, > 0, or None (default: no watchdog):
        when no training step ends within it (after the first compile), one ERROR names
        the stage the loop waits in and every thread's stack is dumped, once per hang.
      exit_on_hang: (a JAX addition) bool, False: also exit (status 124, ``timeout``'s)
        after the hang report, so that a scheduler restarts the job.
      local_checkpoint_dir / local_save_checkpoints_steps: (a JAX addition) a node-local
        directory (str or os.PathLike, stored as str; it must be, or be creatable as, a
        writable directory) and the steps (int >= 1) between saves to it, set together or
        not at all: frequent checkpoints go there while the model_dir keeps
        ``save_checkpoints_steps``; restore takes the newest intact checkpoint of the two.

    Raises:
      ValueError: both checkpoint intervals set; a field breaks its rule (negative
        counts, ``keep_checkpoint_every_n_hours <= 0``, ``log_step_count_steps <= 0``,
        a non-integer seed, an empty model_dir, master and cluster both set,
        ``steps_per_execution`` neither ``'auto'`` nor an int >= 1,
        ``peak_flops_per_device <= 0``, a preemption signal that is not a catchable
        signal, only one of the local tier's two fields, a local_checkpoint_dir that
        is a file or cannot be written, ``heartbeat_timeout_secs=None``, ...).
      TypeError: a count that is not a number; tpu_config that is not a TPUConfig;
        export_jax_artifact or exit_on_hang that is not a bool; preemption_signals that
        is not a non-empty tuple; a cluster that is none of Cluster, dict or
        ClusterResolver.
    """

    # The fields, in REPLACEABLE_FIELDS' order, then the ones replace() may not change.
    model_dir: _Field[str | None] = _Field()
    tf_random_seed: _Field[int | None] = _Field()
    save_summary_steps: _Field[int | None] = _Field()
    save_checkpoints_steps: _Field[int | None] = _Field()
    save_checkpoints_secs: _Field[float | None] = _Field()
    session_config: _Field[Any] = _Field()
    keep_checkpoint_max: _Field[int | None] = _Field()
    keep_checkpoint_every_n_hours: _Field[float] = _Field()
    log_step_count_steps: _Field[int | None] = _Field()
    train_distribute: _Field[Any] = _Field()
    device_fn: _Field[Callable[..., Any] | None] = _Field()
    protocol: _Field[str | None] = _Field()
    eval_distribute: _Field[Any] = _Field()
    experimental_distribute: _Field[Any] = _Field()
    experimental_max_worker_delay_secs: _Field[int | None] = _Field()
    session_creation_timeout_secs: _Field[int] = _Field()
    checkpoint_save_graph_def: _Field[bool] = _Field()
    tpu_config: _Field[TPUConfig] = _Field()
    steps_per_execution: _Field[int | str] = _Field()
    export_jax_artifact: _Field[bool] = _Field()
    peak_flops_per_device: _Field[float | None] = _Field()
    heartbeat_timeout_secs: _Field[float] = _Field()
    preemption_signals: _Field[tuple[int, ...]] = _Field()
    hang_timeout_secs: _Field[float | None] = _Field()
    exit_on_hang: _Field[bool] = _Field()
    local_checkpoint_dir: _Field[str | None] = _Field()
    local_save_checkpoints_steps: _Field[int | None] = _Field()
    evaluation_master: _Field[str | None] = _Field()
    master: _Field[str | None] = _Field()
    cluster: _Field[Any] = _Field()

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        tf_random_seed: int | None = None,
        save_summary_steps: int | None = 100,
        save_checkpoints_steps: Any = _USE_DEFAULT,
        save_checkpoints_secs: Any = _USE_DEFAULT,
        session_config: Any = None,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: float = 10000,
        log_step_count_steps: int | None = 100,
        train_distribute: Any = None,
        device_fn: Any = None,
        protocol: str | None = None,
        eval_distribute: Any = None,
        experimental_distribute: Any = None,
        experimental_max_worker_delay_secs: int | None = None,
        session_creation_timeout_secs: int = 7200,
        checkpoint_save_graph_def: bool = True,
        tpu_config: TPUConfig | None = None,
        evaluation_master: str | None = None,
        master: str | None = None,
        cluster: Any = None,
        steps_per_execution: int | str = "auto",
        export_jax_artifact: bool = False,
        peak_flops_per_device: float | None = None,
        heartbeat_timeout_secs: float = 100,
        preemption_signals: tuple[int, ...] = (signal.SIGTERM,),
        hang_timeout_secs: float | None = None,
        exit_on_hang: bool = False,
        local_checkpoint_dir: str | os.PathLike[str] | None = None,
        local_save_checkpoints_steps: int | None = None,
    ) -> None:
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        elif save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError(
                "RunConfig: save_checkpoints_steps and save_checkpoints_secs cannot both be set; "
                f"got {save_checkpoints_steps!r} and {save_checkpoints_secs!r}."
            )
        if master is not None and cluster is not None:
            raise ValueError("RunConfig: master and cluster cannot both be set.")
        if master is None and cluster is not None and callable(getattr(cluster, "master", None)):
            master = cluster.master()
        values = dict(
            model_dir=os.fspath(model_dir) if model_dir is not None else None,
            tf_random_seed=tf_random_seed,
            save_summary_steps=save_summary_steps,
            save_checkpoints_steps=save_checkpoints_steps,
            save_checkpoints_secs=save_checkpoints_secs,
            session_config=session_config,
            keep_checkpoint_max=keep_checkpoint_max,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
            log_step_count_steps=log_step_count_steps,
            train_distribute=train_distribute,
            device_fn=device_fn,
            protocol=protocol,
            eval_distribute=eval_distribute,
            experimental_distribute=experimental_distribute,
            experimental_max_worker_delay_secs=experimental_max_worker_delay_secs,
            session_creation_timeout_secs=session_creation_timeout_secs,
            checkpoint_save_graph_def=checkpoint_save_graph_def,
            tpu_config=TPUConfig() if tpu_config is None else tpu_config,
            evaluation_master=evaluation_master if evaluation_master is not None else master,
            master=master,
            cluster=cluster,
            steps_per_execution=steps_per_execution,
            export_jax_artifact=export_jax_artifact,
            peak_flops_per_device=peak_flops_per_device,
            heartbeat_timeout_secs=heartbeat_timeout_secs,
            preemption_signals=_signals(preemption_signals),
            hang_timeout_secs=hang_timeout_secs,
            exit_on_hang=exit_on_hang,
            local_checkpoint_dir=_path(local_checkpoint_dir),
            local_save_checkpoints_steps=local_save_checkpoints_steps,
        )
        for key, value in values.items():
            object.__setattr__(self, "_" + key, value)
        _validate(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.lstrip("_") in REPLACEABLE_FIELDS + _OTHER_FIELDS:
            raise AttributeError(
                f"RunConfig.{name.lstrip('_')} is read-only; use config.replace({name}=...)."
            )
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in REPLACEABLE_FIELDS[:9])
        return f"{type(self).__name__}({shown}, ...)"

    def _evaluator_index(self) -> int | None:
        """This process's index as TF_CONFIG's ``evaluator`` task (None: not one)."""
        from jaxspec.config.cluster import EVALUATOR, run_config_task

        task = run_config_task(self._cluster)
        return task[1] if task is not None and task[0] == EVALUATOR else None

    @property
    def is_chief(self) -> bool:
        """True on JAX process 0 (the process that writes summaries and exports); False
        on TF_CONFIG's ``evaluator`` task, as in tf.estimator (it still writes its own
        evaluations and exports: it runs alone)."""
        import jax

        return self._evaluator_index() is None and jax.process_index() == 0

    @property
    def num_worker_replicas(self) -> int:
        """Number of JAX processes (the chief and the workers); 0 on the evaluator task,
        which is not one of them (as tf.estimator)."""
        import jax

        return 0 if self._evaluator_index() is not None else jax.process_count()

    @property
    def num_ps_replicas(self) -> int:
        """0: JAX has no parameter servers."""
        return 0

    @property
    def task_type(self) -> str:
        """``'chief'`` on process 0 (``'master'`` when TF_CONFIG's cluster, or a
        ClusterResolver's, has a ``master`` job, as in tf.estimator), ``'worker'`` on the others, ``'evaluator'``
        on TF_CONFIG's evaluator task."""
        from jaxspec.config.cluster import chief_task_type

        if self._evaluator_index() is not None:
            return "evaluator"
        return chief_task_type(self._cluster) if self.is_chief else "worker"

    @property
    def task_id(self) -> int:
        """This JAX process's index; on the evaluator task, TF_CONFIG's index."""
        import jax

        index = self._evaluator_index()
        return jax.process_index() if index is None else index

    @property
    def global_id_in_cluster(self) -> int | None:
        """This JAX process's index (processes are the cluster's tasks); None on the
        evaluator task, which is outside the training cluster (as tf.estimator)."""
        return None if self._evaluator_index() is not None else self.task_id

    @property
    def service(self) -> None:
        """None (TF_CONFIG's service entry is not read)."""
        return None

    @property
    def cluster_spec(self) -> dict[str, Any]:
        """An empty dict: JAX's processes are found by ``jax.distributed``, not a spec."""
        return {}

    def replace(self, **kwargs: Any) -> RunConfig:
        """A copy with the given fields replaced (``RunConfig.replace``); the copy keeps
        the class of ``self``. Setting one of save_checkpoints_steps/_secs to a value
        clears the other, as in TF.

        Raises:
          ValueError: a field that ``replace`` may not change (see REPLACEABLE_FIELDS),
            both checkpoint intervals given, or a value that breaks its rule.
          TypeError: as the constructor.
        """
        for key in kwargs:
            if key not in REPLACEABLE_FIELDS:
                raise ValueError(
                    f"RunConfig.replace: {key!r} cannot be replaced; replaceable fields are {REPLACEABLE_FIELDS}."
                )
        new = copy.copy(self)
        for key, value in kwargs.items():
            if key in ("model_dir", "local_checkpoint_dir"):
                value = _path(value)
            if key == "preemption_signals":
                value = _signals(value)
            object.__setattr__(new, "_" + key, value)
        steps, secs = new.save_checkpoints_steps, new.save_checkpoints_secs
        if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" in kwargs:
            if steps is not None and secs is not None:
                raise ValueError(
                    "RunConfig.replace: save_checkpoints_steps and save_checkpoints_secs are both set."
                )
        elif "save_checkpoints_steps" in kwargs and steps is not None:
            object.__setattr__(new, "_save_checkpoints_secs", None)
        elif "save_checkpoints_secs" in kwargs and secs is not None:
            object.__setattr__(new, "_save_checkpoints_steps", None)
        if new.tpu_config is None:
            object.__setattr__(new, "_tpu_config", TPUConfig())
        _validate(new)
        return new
