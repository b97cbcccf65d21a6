"""Joining several processes into one mesh with JAX's multi-controller runtime.

Every process runs the same script; ``jax.distributed.initialize`` connects them, after
which ``jax.devices()`` spans all of them and TPUEstimator's mesh does too. The cluster
comes from, in order: ``RunConfig(cluster=...)`` (a ``Cluster``, a dict of its
arguments, or a TF ``ClusterResolver``); ``TF_CONFIG``, the variable tf.estimator users
already set (its ``chief`` or legacy ``master`` and ``worker`` tasks are the training
processes; an ``evaluator`` task, as in tf.estimator, is outside the training cluster
and joins nothing; ``ps`` tasks are refused); the launcher's own variables (Slurm, Open
MPI, Cloud TPU, Kubernetes: ``jaxspec.config.launchers``); ``JAX_COORDINATOR_ADDRESS`` +
``JAX_NUM_PROCESSES`` + ``JAX_PROCESS_ID``. ``docs/cluster.md`` ("Launchers") says more.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import jax

from jaxspec.config.launchers import Launch, detect_launch

_log = logging.getLogger("jaxspec")

CHIEF, WORKER, EVALUATOR, MASTER, PS = "chief", "worker", "evaluator", "master", "ps"
TASK_TYPES = (CHIEF, MASTER, WORKER, EVALUATOR)

# What each process of this process's cluster is called: set once it is known (joined or
# alone); describe_process reads it.
_roles: list[str] = []
_this_process: int = 0
_said_alone = False  # the one-process INFO line was logged (once per process, not per Estimator)


def _parse(tf_config: str | dict[str, Any] | None) -> dict[str, Any]:
    raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    if not raw:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def _check_jobs(cluster: dict[str, Any], kind: str) -> None:
    if PS in cluster or kind == PS:
        raise ValueError(
            "TF_CONFIG: the cluster has a 'ps' job (parameter servers), which JAX has no "
            "counterpart of: every process holds the whole state and trains data-parallel. "
            "Launch the chief (or master) and the workers only, without 'ps' tasks."
        )
    if MASTER in cluster and CHIEF in cluster:
        raise ValueError("TF_CONFIG: a cluster may have a 'chief' or a 'master' job, not both.")
    for job in (CHIEF, MASTER):
        if len(cluster.get(job, [])) > 1:
            raise ValueError(f"TF_CONFIG may list one {job!r} task, got {len(cluster[job])}.")


def task_from_tf_config(tf_config: str | dict[str, Any] | None = None) -> tuple[str, int] | None:
    """This process's ``(task type, task index)`` in ``TF_CONFIG`` (the environment
    variable when None), or None without a TF_CONFIG cluster (one local process, as
    tf.estimator). The type defaults to ``'chief'``, the index to 0. A ``master`` task
    (TF1 clusters, Kubeflow TFJobs, AI Platform) is returned as ``'chief'``: it is the
    chief, as in tf.estimator. ``environment`` (``"cloud"``...) is accepted and not
    used. The index of an ``evaluator`` is not checked here: ``train_and_evaluate``
    refuses one above 0, as tf.estimator's does.

    Raises:
      ValueError: a task other than worker 0 without a cluster; a ``ps`` job in the
        cluster or a ``ps`` task (JAX has no parameter servers); a task type other than
        chief, master, worker or evaluator; a negative index; both a chief and a master,
        or more than one of either; more than one ``evaluator`` in the cluster.
    """
    spec = _parse(tf_config)
    cluster, task = spec.get("cluster"), spec.get("task") or {}
    if not cluster:  # one local process, as tf.estimator: only its default task is allowed
        if task.get("type", WORKER) != WORKER or int(task.get("index", 0)) != 0:
            raise ValueError(f"TF_CONFIG: without a 'cluster' the task must be worker 0, got {task}.")
        return None
    kind, index = task.get("type", CHIEF), int(task.get("index", 0))
    _check_jobs(cluster, kind)
    if kind not in TASK_TYPES:
        raise ValueError(f"TF_CONFIG task type {kind!r} is not supported (one of {TASK_TYPES}).")
    if index < 0:
        raise ValueError(f"TF_CONFIG task index must be >= 0, got {index}.")
    if len(cluster.get(EVALUATOR, [])) > 1:
        raise ValueError(f"TF_CONFIG may list one 'evaluator' task, got {len(cluster[EVALUATOR])}.")
    return (CHIEF if kind == MASTER else kind), index


def tf_config_chief_type(tf_config: str | dict[str, Any] | None = None) -> str:
    """``'master'`` when TF_CONFIG's cluster names its chief ``master`` (the chief's
    task type then reads ``'master'``, as in tf.estimator), else ``'chief'``."""
    return MASTER if MASTER in (_parse(tf_config).get("cluster") or {}) else CHIEF


def chief_task_type(cluster: Any) -> str:
    """The chief's task type for RunConfig's ``cluster`` field: ``'master'`` when
    TF_CONFIG (``cluster`` None) or a ClusterResolver has a ``master`` job; else
    ``'chief'`` (always for a Cluster or a dict)."""
    if isinstance(cluster, (Cluster, dict)):
        return CHIEF
    return tf_config_chief_type(None if cluster is None else tf_config_from_resolver(cluster))


def _job_addresses(job: Any) -> list[str]:
    """A job's addresses in index order: a list, or a dict index -> address (sparse)."""
    if isinstance(job, dict):
        return [job[k] for k in sorted(job, key=int)]
    return list(job)


def tf_config_from_resolver(resolver: Any) -> dict[str, Any]:
    """TF_CONFIG's dict for an object with TF's ``ClusterResolver`` interface:
    ``cluster_spec()`` (a ``tf.train.ClusterSpec`` or anything with ``as_dict()``, or a
    dict job -> addresses), ``task_type`` and ``task_id`` (either may be None).

    Raises:
      TypeError: ``resolver`` has no ``cluster_spec`` method.
    """
    if not callable(getattr(resolver, "cluster_spec", None)):
        raise TypeError(
            "RunConfig.cluster must be a jaxspec.config.cluster.Cluster, a dict of its arguments or a "
            f"ClusterResolver (cluster_spec(), task_type, task_id); got {type(resolver).__name__}."
        )
    spec = resolver.cluster_spec()
    jobs = spec.as_dict() if callable(getattr(spec, "as_dict", None)) else dict(spec or {})
    task = {"type": getattr(resolver, "task_type", None), "index": getattr(resolver, "task_id", None)}
    config: dict[str, Any] = {"cluster": {k: _job_addresses(v) for k, v in jobs.items()}}
    config["task"] = {k: v for k, v in task.items() if v is not None}
    return config


class Cluster:
    """Where this process sits in a multi-process run (``jax.distributed.initialize``'s
    arguments).

    Args:
      coordinator_address: ``host:port`` of process 0's coordination service (None:
        JAX's cluster detection or ``JAX_COORDINATOR_ADDRESS`` finds it).
      num_processes: total number of processes (int). ``Cluster(num_processes=1)`` is
        the opt-out: this process runs alone and joins nothing, whatever TF_CONFIG or
        the launcher say (N independent copies on purpose).
      process_id: this process's index, 0..num_processes-1 (0 is the chief: it writes
        summaries and exports and runs host_call).
      local_device_ids: devices of this process to use (None: all).

    Raises:
      ValueError: process_id outside 0..num_processes-1.
    """

    def __init__(
        self,
        coordinator_address: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
        local_device_ids: Any = None,
    ) -> None:
        if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
            raise ValueError(f"Cluster: process_id {process_id} is not in 0..{num_processes - 1}.")
        self.coordinator_address = coordinator_address
        self.num_processes = num_processes
        self.process_id = process_id
        self.local_device_ids = local_device_ids
        self.launch: Launch | None = None  # set when a launcher described the cluster
        self.roles: list[str] | None = None  # each process's name (TF_CONFIG's tasks)
        self.source = "RunConfig.cluster"  # where the cluster was found, for the INFO line

    @classmethod
    def from_tf_config(cls, tf_config: str | dict[str, Any] | None = None) -> Cluster | None:
        """A Cluster from ``TF_CONFIG`` (the environment variable when None): processes
        are the chief or master (if any) then the workers in order; the coordinator is
        process 0's address. Returns None when there is no TF_CONFIG, when its chief and
        workers are one task, or for an ``evaluator`` task: as in tf.estimator, the
        evaluator is not part of the training cluster (it runs alone and does not join
        ``jax.distributed``); an ``evaluator`` job listed in ``cluster`` is not counted.

        Raises:
          ValueError: as ``task_from_tf_config`` (a ``ps`` job among them).
        """
        found = task_from_tf_config(tf_config)
        if found is None:
            return None
        (kind, index), cluster = found, _parse(tf_config)["cluster"]
        if kind == EVALUATOR:
            return None
        head = tf_config_chief_type(tf_config)
        chiefs, workers = list(cluster.get(head, [])), list(cluster.get(WORKER, []))
        if len(chiefs) + len(workers) <= 1:
            return None
        process_id = index if kind == CHIEF else len(chiefs) + index
        made = cls((chiefs + workers)[0], len(chiefs) + len(workers), process_id)
        made.roles = [f"{head} 0"] * len(chiefs) + [f"worker {i}" for i in range(len(workers))]
        made.source = "TF_CONFIG"
        return made

    @classmethod
    def from_launch(cls, launch: Launch) -> Cluster:
        """The Cluster a launcher describes (``jaxspec.config.launchers.detect_launch``)."""
        made = cls(launch.coordinator_address, launch.num_processes, launch.process_id)
        made.launch, made.source = launch, launch.launcher
        made.roles = [f"{launch.task_word} {i}" for i in range(launch.num_processes)]
        return made

    def initialize(self, heartbeat_timeout_secs: float = 100) -> None:
        """Join the cluster: the one call of ``jax.distributed.initialize`` (on CPU the
        collectives use gloo), then one INFO line naming the launcher, this process
        (i of n) and the local and global device counts. It does nothing when JAX's
        distributed runtime is already initialized (the program joined itself), and
        joins nothing for one process (``num_processes=1``: the opt-out, or a launcher
        that started one process), which then runs alone without waiting.

        JAX's preemption service (``jax_enable_preemption_service``, on by default) is
        turned off for the join unless the ``JAX_ENABLE_PREEMPTION_SERVICE`` variable is
        set: its notifier takes SIGTERM from the process (a C++ handler), so a SIGTERM
        outside ``train`` (a first compile, ``evaluate``, an export) would be ignored,
        where one process ends on it. ``train`` handles preemption signals itself, agreed
        across processes; Orbax's ``CheckpointManager`` works without the service.

        Args:
          heartbeat_timeout_secs: seconds (> 0; rounded up to whole seconds, as JAX
            takes them) without a heartbeat after which the coordination service
            declares a process dead (``RunConfig.heartbeat_timeout_secs``, JAX's 100).

        Raises:
          RuntimeError: JAX was used in this process before the join (JAX allows it
            only before its backend starts); the message says what to do.
        """
        global _roles, _this_process, _said_alone
        if jax.distributed.is_initialized():
            return
        if self.num_processes == 1:
            _roles, _this_process = (self.roles or ["process 0"])[:1], 0
            if self.launch is not None and not _said_alone:  # each Estimator asks again: say it once
                _log.info("%s started one process: it runs alone, nothing to join.", self.launch.launcher)
                _said_alone = True
            return
        launch = self.launch
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if "JAX_ENABLE_PREEMPTION_SERVICE" not in os.environ:
            # JAX's preemption notifier is a C++ SIGTERM handler: outside train a SIGTERM
            # would then be swallowed. jaxspec agrees on preemption stops itself
            # (jaxspec.loop.preemption_agreement), so SIGTERM keeps its own action there.
            jax.config.update("jax_enable_preemption_service", False)
        try:
            jax.distributed.initialize(
                self.coordinator_address,
                self.num_processes,
                self.process_id,
                local_device_ids=self.local_device_ids,
                cluster_detection_method=launch.method
                if launch and launch.coordinator_address is None
                else None,
                heartbeat_timeout_seconds=max(1, math.ceil(heartbeat_timeout_secs)),
            )
        except RuntimeError as error:
            if "before any JAX calls" not in str(error):
                raise
            raise RuntimeError(
                f"jaxspec: {self.source} describes {self.num_processes} processes, but JAX was used "
                "in this process before they could join (jax.distributed.initialize must come first). "
                "Call jaxspec.config.cluster.maybe_initialize(None) before any other JAX call, or pass "
                "RunConfig(cluster=jaxspec.config.cluster.Cluster(num_processes=1)) to run alone."
            ) from error
        _roles = self.roles or [f"process {i}" for i in range(jax.process_count())]
        _this_process = jax.process_index()
        _log.info(
            "Joined the cluster of %s as %s: %d local devices, %d in all.",
            self.source,
            describe_process(),
            jax.local_device_count(),
            jax.device_count(),
        )


def describe_process(process_id: int | None = None) -> str:
    """A process of this run as its launcher names it, e.g. ``'worker 1 (process 2 of
    4)'`` (TF_CONFIG), ``'task 1 (process 1 of 2)'`` (Slurm), ``'rank 1 (process 1 of
    2)'`` (mpirun), ``'process 1 (process 1 of 2)'`` (a Cluster given in the program);
    process ids are JAX's, 0-based; ``'process 0 (process 0 of 1)'`` before any join.

    Args:
      process_id: a JAX process index (None: this process).
    """
    index = _this_process if process_id is None else process_id
    count = max(len(_roles), 1)
    name = _roles[index] if 0 <= index < len(_roles) else f"process {index}"
    return f"{name} (process {index} of {count})"


def find_cluster(cluster: Any = None) -> Cluster | None:
    """The cluster this process belongs to, first found of: ``cluster`` (RunConfig's:
    a Cluster, a dict of its arguments, or a ClusterResolver), TF_CONFIG's cluster, the
    launcher's variables, the ``JAX_*`` variables (``jaxspec.config.launchers``). None: one
    process.

    Raises:
      ValueError: as ``task_from_tf_config`` and ``jaxspec.config.launchers.detect_launch``.
      TypeError: ``cluster`` is none of the forms above.
    """
    if isinstance(cluster, dict):
        return Cluster(**cluster)
    if isinstance(cluster, Cluster):
        return cluster
    if cluster is not None:
        found = Cluster.from_tf_config(tf_config_from_resolver(cluster))
        if found is not None:
            found.source = f"the ClusterResolver {type(cluster).__name__}"
        return found
    if task_from_tf_config() is not None:
        return Cluster.from_tf_config()
    launch = detect_launch()
    return None if launch is None else Cluster.from_launch(launch)


def maybe_initialize(cluster: Any, heartbeat_timeout_secs: float = 100) -> None:
    """Join the cluster ``find_cluster(cluster)`` finds (``Cluster.initialize``);
    nothing for a single process or when JAX's distributed runtime is already up.

    Args:
      cluster: RunConfig's ``cluster`` field.
      heartbeat_timeout_secs: ``RunConfig.heartbeat_timeout_secs`` (seconds).

    Raises:
      ValueError, TypeError: as ``find_cluster``.
      RuntimeError: as ``Cluster.initialize``.
    """
    if jax.distributed.is_initialized():
        return
    found = find_cluster(cluster)
    if found is not None:
        found.initialize(heartbeat_timeout_secs)


def run_config_task(cluster: Any) -> tuple[str, int] | None:
    """The TF_CONFIG task that a RunConfig whose ``cluster`` field is ``cluster`` runs as:
    a ClusterResolver's task (as ``task_from_tf_config``); None for a Cluster or a dict
    (a cluster given as an argument has no TF_CONFIG roles: every process trains and
    evaluates together); otherwise ``task_from_tf_config()`` (None without TF_CONFIG)."""
    if isinstance(cluster, (Cluster, dict)):
        return None
    if cluster is not None:
        return task_from_tf_config(tf_config_from_resolver(cluster))
    return task_from_tf_config()
