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
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import jaxspec
from jaxspec.store.checkpoints import CheckpointStore, _one_copy


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


def _key_model_fn(features, labels, mode, params, state):
    loss = jnp.mean((features["x"] * state["w"] - labels) ** 2)
    new = {"w": state["w"] - 0.5, "key": jax.random.split(state["key"])[0]}
    spec = jaxspec.TPUEstimatorSpec if params.get("tpu") else jaxspec.EstimatorSpec
    return spec(mode, loss=loss, train_op=new)


def _key_input_fn(params=None):
    rows = (params or {}).get("batch_size", 8)
    for _ in range(100):
        yield {"x": np.ones((rows,), np.float32)}, np.zeros((rows,), np.float32)


def _key_estimator(model_dir, use_tpu):
    config = jaxspec.RunConfig(model_dir=str(model_dir), log_step_count_steps=None, save_summary_steps=None)
    init = lambda: {"w": jnp.ones((), jnp.float32), "key": jax.random.key(7)}  # noqa: E731
    if use_tpu is None:
        return jaxspec.Estimator(_key_model_fn, config=config, params={}, init_fn=init)
    return jaxspec.TPUEstimator(
        _key_model_fn, config=config, params={"tpu": True}, use_tpu=use_tpu, train_batch_size=8, init_fn=init
    )


@pytest.mark.parametrize("use_tpu", [None, True])
def test_a_typed_key_in_the_state_trains_saves_and_resumes(tmp_path, use_tpu):
    """A ``jax.random.key`` leaf is carried through train_op, saved, restored by a new
    Estimator and read back as its key data: 2 + 3 steps equal 5 splits by hand."""
    _key_estimator(tmp_path, use_tpu).train(_key_input_fn, steps=2)
    est = _key_estimator(tmp_path, use_tpu)  # a new Estimator: restores from disk
    est.train(_key_input_fn, steps=3)
    want = jax.random.key(7)
    for _ in range(5):
        want = jax.random.split(want)[0]
    np.testing.assert_array_equal(est.get_variable_value("key"), jax.random.key_data(want))
    assert est.get_variable_value("w") == np.float32(1.0 - 5 * 0.5)


def test_a_train_op_with_another_key_type_names_the_leaf(tmp_path):
    def model_fn(features, labels, mode, state):
        loss = jnp.mean(features["x"] * state["w"])
        return jaxspec.EstimatorSpec(
            mode, loss=loss, train_op={"w": state["w"], "key": jax.random.PRNGKey(0)}
        )

    est = jaxspec.Estimator(
        model_fn,
        model_dir=str(tmp_path),
        init_fn=lambda: {"w": jnp.ones((), jnp.float32), "key": jax.random.key(0)},
    )
    with pytest.raises(ValueError, match=r"train_op leaf .*key"):
        est.train(_key_input_fn, steps=1)
