"""TPUContext: what input_fn learns about the mesh through ``params['context']``."""

from __future__ import annotations

from typing import Any


class TPUContext:
    """The mesh as input_fn sees it (``params['context']``, as TPUEstimator's input_fn
    gets a ``TPUContext``).

    Attributes:
      num_replicas: replicas in the mesh (all processes).
      num_hosts: JAX processes.
      current_host: this process's index.
      num_of_replicas_per_host: replicas on this process.
      input_pipeline: the InputPipelineConfig in use.
      mode: the ModeKeys value of the call.
      num_of_cores_per_host: devices of this process in the mesh (replicas times
        ``num_cores_per_replica``).
      num_cores_per_replica: devices of one replica (1 without model parallelism).
    """

    def __init__(
        self,
        num_replicas: int,
        num_hosts: int,
        current_host: int,
        num_of_replicas_per_host: int,
        input_pipeline: Any,
        mode: str,
        host_device: str = "",
        invocation_index: int = 0,
        total_invocations: int = 1,
        num_cores_per_replica: int = 1,
    ) -> None:
        self.num_replicas = num_replicas
        self.num_hosts = num_hosts
        self.current_host = current_host
        self.num_of_replicas_per_host = num_of_replicas_per_host
        self.input_pipeline = input_pipeline
        self.mode = mode
        self.num_cores_per_replica = num_cores_per_replica
        self.num_of_cores_per_host = num_of_replicas_per_host * num_cores_per_replica
        self._deployment = (host_device, invocation_index, total_invocations)

    def current_input_fn_deployment(self) -> tuple[str, int, int]:
        """``(host_device, invocation_index, total_invocations)`` of this input_fn call:
        with PER_SHARD_V1 input_fn runs once per local replica (index 0..n-1 on each
        host, ``total_invocations`` = all replicas); otherwise once per host."""
        return self._deployment

    def __repr__(self) -> str:
        return (
            f"TPUContext(num_replicas={self.num_replicas}, num_hosts={self.num_hosts}, "
            f"current_host={self.current_host}, input_pipeline={getattr(self.input_pipeline, 'name', self.input_pipeline)})"
        )
