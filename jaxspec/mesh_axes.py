"""The axis names of jaxspec's device mesh, which users name in ``partition_rules``'
PartitionSpecs and in collectives inside model_fn: ``'replica'`` (data parallel, one
model_fn call per replica) and ``'core'`` (the cores of one replica, partitioned by XLA)."""

REPLICA_AXIS = "replica"
CORE_AXIS = "core"
