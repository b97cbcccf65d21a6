"""Joining several processes into one mesh with JAX's multi-controller runtime.

Every process runs the same script; ``jax.distributed.initialize`` connects them, after
which ``jax.devices()`` spans all of them and TPUEstimator's mesh does too. The cluster
comes from arguments or from ``TF_CONFIG``, the variable tf.estimator users already set:
its ``chief`` and ``worker`` tasks are the training processes; an ``evaluator`` task, as
in tf.estimator, is outside the training cluster and joins nothing.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import jax

_log = logging.getLogger("jaxspec")
_initialized = False

CHIEF, WORKER, EVALUATOR = "chief", "worker", "evaluator"
TASK_TYPES = (CHIEF, WORKER, EVALUATOR)


def _parse(tf_config: str | dict[str, Any] | None) -> dict[str, Any]:
    raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    if not raw:
        return {}
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def task_from_tf_config(tf_config: str | dict[str, Any] | None = None) -> tuple[str, int] | None:
    """This process's ``(task type, task index)`` in ``TF_CONFIG`` (the environment
    variable when None), or None without a TF_CONFIG cluster (one local process, as
    tf.estimator). The type defaults to ``'chief'``, the index to 0. The index of an
    ``evaluator`` is not checked here: ``train_and_evaluate`` refuses one above 0, as
    tf.estimator's does.

    Raises:
      ValueError: a task other than worker 0 without a cluster; a task type other than
        chief, worker or evaluator, a negative index, or more than one ``evaluator`` in
        the cluster.
    """
    spec = _parse(tf_config)
    cluster, task = spec.get("cluster"), spec.get("task") or {}
    if not cluster:  # one local process, as tf.estimator: only its default task is allowed
        if task.get("type", WORKER) != WORKER or int(task.get("index", 0)) != 0:
            raise ValueError(f"TF_CONFIG: without a 'cluster' the task must be worker 0, got {task}.")
        return None
    kind, index = task.get("type", CHIEF), int(task.get("index", 0))
    if kind not in TASK_TYPES:
        raise ValueError(f"TF_CONFIG task type {kind!r} is not supported (one of {TASK_TYPES}).")
    if index < 0:
        raise ValueError(f"TF_CONFIG task index must be >= 0, got {index}.")
    if len(cluster.get(EVALUATOR, [])) > 1:
        raise ValueError(f"TF_CONFIG may list one 'evaluator' task, got {len(cluster[EVALUATOR])}.")
    return kind, index


class Cluster:
    """Where this process sits in a multi-process run (``jax.distributed.initialize``'s
    arguments).

    Args:
      coordinator_address: ``host:port`` of process 0's coordination service.
      num_processes: total number of processes (int).
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

    @classmethod
    def from_tf_config(cls, tf_config: str | dict[str, Any] | None = None) -> Cluster | None:
        """A Cluster from ``TF_CONFIG`` (the environment variable when None): processes
        are the chief (if any) then the workers in order; the coordinator is process 0's
        address. Returns None when there is no TF_CONFIG, when its chief and workers are
        one task, or for an ``evaluator`` task: as in tf.estimator, the evaluator is not
        part of the training cluster (it runs alone and does not join
        ``jax.distributed``); an ``evaluator`` job listed in ``cluster`` is not counted.

        Raises:
          ValueError: as ``task_from_tf_config``.
        """
        found = task_from_tf_config(tf_config)
        if found is None:
            return None
        (kind, index), cluster = found, _parse(tf_config)["cluster"]
        if kind == EVALUATOR:
            return None
        addresses = list(cluster.get(CHIEF, [])) + list(cluster.get(WORKER, []))
        if len(addresses) <= 1:
            return None
        process_id = index if kind == CHIEF else len(cluster.get(CHIEF, [])) + index
        return cls(addresses[0], len(addresses), process_id)

    def initialize(self, heartbeat_timeout_secs: float = 100) -> None:
        """Call ``jax.distributed.initialize`` once (later calls do nothing). On CPU the
        collectives use gloo. Must run before any other JAX work in the process.
        ``heartbeat_timeout_secs`` (``RunConfig``'s; rounded up to whole seconds): how long
        a silent process may go before the coordination service calls it dead."""
        global _initialized
        if _initialized:
            return
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            self.coordinator_address,
            self.num_processes,
            self.process_id,
            local_device_ids=self.local_device_ids,
            heartbeat_timeout_seconds=math.ceil(heartbeat_timeout_secs),
        )
        _initialized = True
        _log.info("Joined the cluster as process %d of %d.", jax.process_index(), jax.process_count())


def maybe_initialize(cluster: Any, heartbeat_timeout_secs: float = 100) -> None:
    """Join the cluster given to RunConfig (a Cluster, or a dict of its arguments), or the
    one TF_CONFIG describes; nothing for a single process. ``heartbeat_timeout_secs``: as
    ``Cluster.initialize``."""
    if isinstance(cluster, dict):
        cluster = Cluster(**cluster)
    if not isinstance(cluster, Cluster):
        cluster = Cluster.from_tf_config()
    if cluster is not None:
        cluster.initialize(heartbeat_timeout_secs)


def run_config_task(cluster: Any) -> tuple[str, int] | None:
    """The TF_CONFIG task that a RunConfig whose ``cluster`` field is ``cluster`` runs as:
    None when ``cluster`` is given (a cluster given as an argument has no TF_CONFIG
    roles: every process trains and evaluates together) or there is no TF_CONFIG;
    otherwise ``task_from_tf_config()``."""
    return None if cluster is not None else task_from_tf_config()
