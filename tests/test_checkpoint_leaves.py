"""What the store hands Orbax for each kind of leaf, and that every kind comes back as saved.

Replicated leaves are saved from a numpy copy of replica 0's shard (checkpoints.py,
``_one_copy``); sharded leaves and PRNG keys as jax.Arrays. A restore must give the target's
jax.Array, sharding and dtype back with the exact values, whichever way the leaf was saved.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxspec.loop.checkpoints import CheckpointStore, _one_copy


def _state(sharding_of):
    rng = np.random.RandomState(0)
    values = {
        "w": rng.randn(8, 4).astype(np.float32),
        "b16": rng.randn(16).astype(ml_dtypes.bfloat16),
        "count": np.int32(7),
        "flags": np.array([True, False, True]),
        "big": rng.randn(8, 6).astype(np.float64).astype(np.float32),
    }
    state = {k: jax.device_put(v, sharding_of(k, v)) for k, v in values.items()}
    state["key"] = jax.random.key(3)
    return values, state


def test_one_copy_hands_numpy_for_replicated_leaves_only():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("replica", "core"))
    replicated = jax.device_put(np.arange(6.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec()))
    sharded = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("core")))
    key = jax.random.key(0)

    copy = _one_copy(replicated)
    assert isinstance(copy, np.ndarray) and copy.flags.owndata
    np.testing.assert_array_equal(copy, np.arange(6.0))
    assert _one_copy(sharded) is sharded
    assert _one_copy(key) is key
    assert _one_copy(3) == 3


def test_every_kind_of_leaf_round_trips_onto_another_layout(tmp_path):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("replica", "core"))

    def saved_layout(name, value):
        if name == "big":  # split over 'core': saved from its shards as a jax.Array
            return NamedSharding(mesh, PartitionSpec("core"))
        return NamedSharding(mesh, PartitionSpec())

    values, state = _state(saved_layout)
    store = CheckpointStore(str(tmp_path), keep_checkpoint_max=2)
    assert store.save(5, state)
    store.wait()

    one = jax.sharding.SingleDeviceSharding(jax.devices()[1])
    target = {k: jax.device_put(jnp.zeros_like(v), one) for k, v in state.items() if k != "key"}
    target["key"] = jax.random.key(0)
    restored = store.restore(5, target)

    for name, want in values.items():
        got = restored[name]
        assert isinstance(got, jax.Array) and got.sharding == one, name
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(state["key"]))
    # the checkpoint read back as numpy (get_variable_value's path) holds the same values
    read = store.read(5)
    for name, want in values.items():
        np.testing.assert_array_equal(read[name], want, err_msg=name)
    np.testing.assert_array_equal(read["key"], jax.random.key_data(state["key"]))
