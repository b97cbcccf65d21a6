"""What a save hands to Orbax: at most one host copy of the state, a sharded leaf never
gathered onto one host (8 virtual CPU devices, from the conftest)."""

from __future__ import annotations

import tracemalloc

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxspec.store import checkpoints
from jaxspec.store.checkpoints import CheckpointStore


def _state():
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    big = np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512)  # 2 MiB: over the numpy limit
    assert big.nbytes > checkpoints.NUMPY_HANDOVER_MAX_BYTES
    return {
        "big": jax.device_put(big, NamedSharding(mesh, P())),
        "small": jax.device_put(np.linspace(0, 1, 100, dtype=np.float32), NamedSharding(mesh, P())),
        "sharded": jax.device_put(big * 2, NamedSharding(mesh, P("x"))),
    }


def _handed(store: CheckpointStore, state) -> dict:
    seen = {}
    save = store._manager.save

    def capture(step, args=None, **kwargs):
        seen.update(args.item)
        return save(step, args=args, **kwargs)

    store._manager.save = capture
    store.save(1, state)
    store.wait()
    return seen


def test_replicated_leaves_go_as_one_shard_and_sharded_ones_as_they_are(tmp_path):
    state = _state()
    handed = _handed(CheckpointStore(str(tmp_path)), state)
    big = handed["big"]
    assert isinstance(big, jax.Array) and len(big.devices()) == 1  # replica 0's shard, not a host copy
    replica0 = next(s for s in state["big"].addressable_shards if s.replica_id == 0)
    assert big.unsafe_buffer_pointer() == replica0.data.unsafe_buffer_pointer()  # the same buffer
    assert isinstance(handed["small"], np.ndarray)
    np.testing.assert_array_equal(handed["small"], np.asarray(state["small"]))
    sharded = handed["sharded"]  # never gathered: the same shards on the same devices
    assert isinstance(sharded, jax.Array) and sharded.sharding == state["sharded"].sharding
    assert {s.device: s.data.unsafe_buffer_pointer() for s in sharded.addressable_shards} == {
        s.device: s.data.unsafe_buffer_pointer() for s in state["sharded"].addressable_shards
    }
    back = CheckpointStore(str(tmp_path)).restore(1, state)
    for name, value in state.items():
        assert back[name].sharding == value.sharding, name
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(value), err_msg=name)


def test_a_save_allocates_at_most_one_host_copy_of_the_state(tmp_path):
    """numpy allocations (tracemalloc traces them) at their peak during a save and its
    wait stay under one copy of the state's bytes."""
    state = _state()
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    CheckpointStore(str(tmp_path / "warm")).save(1, state)  # Orbax's first-use setup, not counted
    store = CheckpointStore(str(tmp_path / "m"))
    tracemalloc.start()
    try:
        store.save(1, state)
        store.wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < state_bytes, (peak, state_bytes)
