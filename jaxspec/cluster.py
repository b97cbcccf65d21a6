"""Joining several processes into one mesh with JAX's multi-controller runtime.

Every process runs the same script; ``jax.distributed.initialize`` connects them, after
which ``jax.devices()`` spans all of them and TPUEstimator's mesh does too. The cluster
comes from arguments or from ``TF_CONFIG`` (chief/worker), the variable tf.estimator
users already set.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax

_log = logging.getLogger("jaxspec")
_initialized = False


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
        address. Returns None when there is no TF_CONFIG or it names one task.

        Raises:
          ValueError: TF_CONFIG has no cluster, or a task type other than chief/worker.
        """
        raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
        if not raw:
            return None
        spec = json.loads(raw) if isinstance(raw, str) else raw
        cluster, task = spec.get("cluster"), spec.get("task", {})
        if not cluster:
            raise ValueError("TF_CONFIG has no 'cluster'.")
        addresses = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
        kind, index = task.get("type", "chief"), int(task.get("index", 0))
        if kind not in ("chief", "worker"):
            raise ValueError(f"TF_CONFIG task type {kind!r} is not supported (chief or worker).")
        if len(addresses) <= 1:
            return None
        process_id = index if kind == "chief" else len(cluster.get("chief", [])) + index
        return cls(addresses[0], len(addresses), process_id)

    def initialize(self) -> None:
        """Call ``jax.distributed.initialize`` once (later calls do nothing). On CPU the
        collectives use gloo. Must run before any other JAX work in the process."""
        global _initialized
        if _initialized:
            return
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            self.coordinator_address,
            self.num_processes,
            self.process_id,
            local_device_ids=self.local_device_ids,
        )
        _initialized = True
        _log.info("Joined the cluster as process %d of %d.", jax.process_index(), jax.process_count())


def maybe_initialize(cluster: Any) -> None:
    """Join the cluster given to RunConfig (a Cluster, or a dict of its arguments), or the
    one TF_CONFIG describes; nothing for a single process."""
    if isinstance(cluster, dict):
        cluster = Cluster(**cluster)
    if not isinstance(cluster, Cluster):
        cluster = Cluster.from_tf_config()
    if cluster is not None:
        cluster.initialize()
