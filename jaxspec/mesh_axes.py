"""The axis names of jaxspec's device mesh, which users name in ``partition_rules``'
PartitionSpecs and in collectives inside model_fn: the replica axis (data parallel, one
model_fn call per replica; ``'replica'`` unless ``TPUConfig(replica_axis_name=...)``
names it otherwise) and ``'core'`` (the cores of one replica, partitioned by XLA)."""

from __future__ import annotations

import jax

REPLICA_AXIS = "replica"
CORE_AXIS = "core"


def traced_replica_axis() -> str:
    """The replica axis of the mesh being traced: the axis TPUEstimator's shard_map is
    manual over (whatever ``replica_axis_name`` called it); ``'replica'`` outside one."""
    try:
        manual = [a for a in jax.sharding.get_abstract_mesh().manual_axes if a != CORE_AXIS]
    except (AttributeError, RuntimeError):  # no abstract mesh in this JAX / context
        manual = []
    return manual[0] if len(manual) == 1 else REPLICA_AXIS
