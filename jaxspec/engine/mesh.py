"""The 1-D replica mesh and how host batches become global arrays on it."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

REPLICA_AXIS = "replica"


def make_replica_mesh(num_shards: int | None = None) -> Mesh:
    """A 1-D mesh named ``'replica'`` over ``num_shards`` devices (all of them if None).

    Devices are ``jax.devices()``, which spans every process after
    ``jax.distributed.initialize``.

    Raises:
      ValueError: ``num_shards`` exceeds the number of devices.
    """
    devices = jax.devices()
    n = num_shards or len(devices)
    if n > len(devices):
        raise ValueError(f"num_shards={n} but only {len(devices)} devices are available.")
    return Mesh(np.array(devices[:n]), (REPLICA_AXIS,))


def replicated(mesh: Mesh | None) -> Any:
    """Sharding of the state: a full copy on every replica (None off the mesh)."""
    return None if mesh is None else NamedSharding(mesh, P())


def stacked_batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of ``[steps, batch, ...]`` inputs: batch split over replicas."""
    return NamedSharding(mesh, P(None, REPLICA_AXIS))


def canonical_host_array(x: Any) -> np.ndarray:
    """``x`` as numpy with JAX's canonical dtype (float64 -> float32 unless x64 is on)."""
    x = np.asarray(x)
    return x.astype(jax.dtypes.canonicalize_dtype(x.dtype), copy=False)


def put_stacked(tree: Any, mesh: Mesh | None, broadcast: bool = False) -> Any:
    """Move host arrays ``[steps, batch, ...]`` to the devices.

    On the mesh each process passes its local rows and gets a global array whose batch
    axis is split over the replicas (``jax.make_array_from_process_local_data``), so no
    host ever gathers the global batch. With ``broadcast`` (BROADCAST input) every
    replica gets the whole batch: process 0's, sent to the others.
    """
    if mesh is None:
        return jax.device_put(tree)  # one call for the whole tree
    if broadcast:
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            tree = multihost_utils.broadcast_one_to_all(tree)
        return jax.device_put(tree, replicated(mesh))
    sharding = stacked_batch_sharding(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), tree)


def put_replicated(tree: Any, mesh: Mesh | None) -> Any:
    """Place a state pytree on every replica (or on the default device off the mesh)."""
    if mesh is None:
        return jax.device_put(tree)
    return jax.device_put(tree, replicated(mesh))


def replica_index(mesh: Mesh | None) -> Any:
    """This replica's index inside shard_map (0 off the mesh)."""
    return 0 if mesh is None else jax.lax.axis_index(REPLICA_AXIS)
