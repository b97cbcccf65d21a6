"""The replica mesh (1-D, or 2-D ``('replica', 'core')`` with model parallelism) and how
host batches become global arrays on it."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxspec.mesh_axes import CORE_AXIS, REPLICA_AXIS  # noqa: F401 - the engine's names for them


def make_replica_mesh(
    num_shards: int | None = None,
    num_cores_per_replica: int | None = None,
    replica_axis_name: str = REPLICA_AXIS,
) -> Mesh:
    """The mesh of TPUEstimator's replicas.

    ``replica_axis_name`` (TPUConfig's, ``'replica'`` by default) names the data-parallel
    axis, always the mesh's first. With ``num_cores_per_replica`` None or 1: a 1-D mesh
    named ``replica_axis_name`` over
    ``num_shards`` devices (all of them if None). With ``num_cores_per_replica=k > 1``: a
    2-D mesh ``('replica', 'core')`` of shape ``(replicas, k)``, ``replicas`` being
    ``num_shards`` or ``devices // k`` (TF: "the total number of cores equals
    num_cores_per_replica * num_shards"); the k cores of a replica are consecutive devices,
    so they share a process whenever k <= its local devices.

    Devices are ``jax.devices()``, which spans every process after
    ``jax.distributed.initialize``.

    Raises:
      ValueError: ``num_shards`` (times k) exceeds the number of devices, or the device
        count is not divisible by k.
    """
    devices = jax.devices()
    k = num_cores_per_replica or 1
    if k == 1:
        n = num_shards or len(devices)
        if n > len(devices):
            raise ValueError(f"num_shards={n} but only {len(devices)} devices are available.")
        return Mesh(np.array(devices[:n]), (replica_axis_name,))
    if num_shards is None and len(devices) % k:
        raise ValueError(f"num_cores_per_replica={k} does not divide the number of devices ({len(devices)}).")
    replicas = num_shards or len(devices) // k
    if replicas * k > len(devices):
        raise ValueError(
            f"num_shards={replicas} with num_cores_per_replica={k} needs {replicas * k} devices; "
            f"only {len(devices)} are available."
        )
    grid = np.array(devices[: replicas * k]).reshape(replicas, k)
    return Mesh(grid, (replica_axis_name, CORE_AXIS))


def replica_axis(mesh: Mesh | None) -> str:
    """The name of the mesh's replica axis (its first; ``'replica'`` off the mesh)."""
    return REPLICA_AXIS if mesh is None else mesh.axis_names[0]


def num_replicas(mesh: Mesh | None) -> int:
    """Replicas of the mesh (1 off the mesh): the size of its replica axis."""
    return 1 if mesh is None else mesh.shape[replica_axis(mesh)]


def cores_per_replica(mesh: Mesh | None) -> int:
    """Devices of one replica: the size of the ``'core'`` axis (1 on a 1-D mesh)."""
    return 1 if mesh is None else dict(mesh.shape).get(CORE_AXIS, 1)


def local_replicas(mesh: Mesh) -> int:
    """Replicas whose devices belong to this process."""
    return mesh.local_mesh.size // cores_per_replica(mesh)


def local_replica_devices(mesh: Mesh) -> list[Any]:
    """The first device of each of this process's replicas, in mesh order."""
    me = jax.process_index()
    grid = mesh.devices.reshape(num_replicas(mesh), -1)
    return [row[0] for row in grid if row[0].process_index == me]


def replicated(mesh: Mesh | None) -> Any:
    """Sharding of the state: a full copy on every replica (None off the mesh)."""
    return None if mesh is None else NamedSharding(mesh, P())


def stacked_batch_sharding(mesh: Mesh, spec: P | None = None) -> NamedSharding:
    """Sharding of ``[steps, batch, ...]`` inputs: batch split over replicas (and, with
    ``spec`` from input_partition_dims, further dimensions over ``'core'``)."""
    return NamedSharding(mesh, P(None, replica_axis(mesh)) if spec is None else spec)


def canonical_host_array(x: Any) -> np.ndarray:
    """``x`` as numpy with JAX's canonical dtype (float64 -> float32 unless x64 is on), in
    the machine's byte order (XLA has no big-endian types)."""
    x = np.asarray(x)
    dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    return x.astype(dtype.newbyteorder("=") if not dtype.isnative else dtype, copy=False)


def partitioned_input_specs(
    batch_args: tuple[Any, ...], input_partition_dims: Any, replica_axis_name: str = REPLICA_AXIS
) -> Any:
    """Per leaf of ``batch_args`` (``(features, labels[, mask])``, stacked
    ``[steps, batch, ...]``): its PartitionSpec from TPUConfig's ``input_partition_dims``
    (``[features_dims, labels_dims]``; each None, a list per tensor dimension, or a dict
    of those by feature name): batch over ``replica_axis_name``, the dimension with more
    than one part over ``'core'``. Leaves without dims (and the mask) get
    ``P(None, replica_axis_name)``.

    Raises:
      ValueError: the dims do not match the input's structure or a tensor's rank, or a
        dimension is not divisible by its parts.
    """
    dims = (list(input_partition_dims) + [None] * len(batch_args))[: len(batch_args)]

    def spec(x: Any, d: Any, where: str) -> P:
        if d is None:
            return P(None, replica_axis_name)
        shape = np.shape(x)[1:]  # [batch, ...] of one step
        if len(d) != len(shape):
            raise ValueError(f"input_partition_dims {list(d)} for {where} of rank {len(shape)} {shape}.")
        if any(n > 1 and size % n for n, size in zip(d, shape, strict=True)):
            raise ValueError(f"input_partition_dims {list(d)} do not divide {where}'s shape {shape}.")
        return P(None, replica_axis_name, *[CORE_AXIS if n > 1 else None for n in d[1:]])

    def specs_for(tree: Any, d: Any, where: str) -> Any:
        if isinstance(d, dict):
            if not isinstance(tree, dict):
                raise ValueError(f"input_partition_dims gives a dict for {where}, which is not a dict.")
            return {k: specs_for(v, d.get(k), f"{where}[{k!r}]") for k, v in tree.items()}
        leaves, treedef = jax.tree.flatten(tree)
        if d is not None and len(leaves) != 1:
            raise ValueError(
                f"input_partition_dims gives one list for {where}, which has {len(leaves)} tensors."
            )
        return jax.tree.unflatten(treedef, [spec(x, d, where) for x in leaves])

    names = ("features", "labels", "mask")
    return tuple(specs_for(arg, d, names[i]) for i, (arg, d) in enumerate(zip(batch_args, dims, strict=True)))


def put_stacked(tree: Any, mesh: Mesh | None, broadcast: bool = False, specs: Any = None) -> Any:
    """Move host arrays ``[steps, batch, ...]`` to the devices.

    On the mesh each process passes its local rows and gets a global array whose batch
    axis is split over the replicas (``jax.make_array_from_process_local_data``), so no
    host ever gathers the global batch. With ``broadcast`` (BROADCAST input) every
    replica gets the whole batch: process 0's, sent to the others. ``specs`` (a tree like
    ``tree`` of PartitionSpecs, from ``partitioned_input_specs``) also splits leaves over
    ``'core'``.
    """
    if mesh is None:
        return tree  # numpy goes to the one device inside the compiled call (its fast path)
    if broadcast:
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            tree = multihost_utils.broadcast_one_to_all(tree)
        return jax.device_put(tree, replicated(mesh))
    if specs is not None:
        return jax.tree.map(
            lambda x, s: jax.make_array_from_process_local_data(NamedSharding(mesh, s), x), tree, specs
        )
    sharding = stacked_batch_sharding(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), tree)


def replica_index(mesh: Mesh | None) -> Any:
    """This replica's index inside shard_map (0 off the mesh)."""
    return 0 if mesh is None else jax.lax.axis_index(replica_axis(mesh))
