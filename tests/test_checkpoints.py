"""Checkpoint round trip: train 10, restart, train to 20 == 20 uninterrupted."""

from __future__ import annotations

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from jaxspec._trees import named_leaves
from tests.helpers import digits, fast_config, init_fn


def noisy_model_fn(features, labels, mode, params, state, rng):
    """Uses ``rng`` (dropout-like noise), so resuming must also resume the key stream."""

    def loss_fn(p):
        x = features["x"] * jax.random.bernoulli(rng, 0.8, features["x"].shape)
        logits = state.apply_fn(p, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def _state(est):
    store = est._checkpoint_store()
    return dict(named_leaves(store._manager.restore(store.latest_step())))


@pytest.mark.parametrize("use_tpu", [False, True])
def test_resume_equals_uninterrupted(tmp_path, use_tpu):
    x, y = digits(32)

    def input_fn():
        return {"x": x}, y  # one batch, repeated in TRAIN

    def make(model_dir):
        return jaxspec.TPUEstimator(
            noisy_model_fn,
            config=fast_config(model_dir, 4, tf_random_seed=7),
            use_tpu=use_tpu,
            train_batch_size=32,
            init_fn=init_fn,
        )

    make(str(tmp_path / "a")).train(input_fn, steps=10)
    resumed = make(str(tmp_path / "a"))
    assert resumed.latest_checkpoint().endswith(os.sep + "10")
    resumed.train(input_fn, max_steps=20)
    straight = make(str(tmp_path / "b"))
    straight.train(input_fn, steps=20)

    a, b = _state(resumed), _state(straight)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=1e-6, err_msg=name)
    assert int(a["step"]) == 20
    # max_steps already reached: nothing runs, nothing is written.
    resumed.train(input_fn, max_steps=15)
    assert resumed._checkpoint_store().all_steps()[-1] == 20


def test_periodic_saves_and_keep_max(tmp_path):
    x, y = digits(32)
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path), save_checkpoints_steps=3, keep_checkpoint_max=2, log_step_count_steps=None
    )
    est = jaxspec.Estimator(noisy_model_fn, config=config, init_fn=init_fn)
    est.train(lambda: ({"x": x}, y), steps=10)
    assert est._checkpoint_store().all_steps() == [9, 10]
    assert "params/params/Dense_0/kernel" in est.get_variable_names()


def test_restore_into_a_different_state_names_the_leaf(tmp_path):
    x, y = digits(32)
    est = jaxspec.Estimator(noisy_model_fn, config=fast_config(str(tmp_path)), init_fn=init_fn)
    est.train(lambda: ({"x": x}, y), steps=1)

    class Wide(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.tanh(nn.Dense(17)(x)))

    def wider_init(rng, features):
        model = Wide()
        params = model.init(rng, jnp.asarray(features["x"][:1]))
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(0.1))

    other = jaxspec.Estimator(noisy_model_fn, config=fast_config(str(tmp_path)), init_fn=wider_init)
    with pytest.raises(ValueError, match="Dense_0/(bias|kernel)"):
        other.train(lambda: ({"x": x}, y), steps=1)


def test_nan_loss_keeps_last_good_checkpoint(tmp_path):
    x, y = digits(32)

    def model_fn(features, labels, mode, state, global_step):
        spec = noisy_model_fn(features, labels, mode, None, state, jax.random.PRNGKey(0))
        loss = jnp.where(global_step >= 3, jnp.nan, spec.loss)
        return spec._replace(loss=loss)

    est = jaxspec.Estimator(model_fn, config=fast_config(str(tmp_path)), init_fn=init_fn)
    est.train(lambda: ({"x": x}, y), steps=2)
    with pytest.raises(jaxspec.NanLossDuringTrainingError, match="at global step 3") as err:
        est.train(lambda: ({"x": x}, y), steps=5)
    assert err.value.global_step == 3
    assert est._checkpoint_store().all_steps() == [0, 2]  # step 0: saved when training started

    def tpu_model_fn(features, labels, mode, params, state, global_step):
        return model_fn(features, labels, mode, state, global_step)

    tpu = jaxspec.TPUEstimator(  # 4 steps per loop: the NaN is the second step of the loop from 2
        tpu_model_fn,
        config=fast_config(str(tmp_path / "tpu"), 4),
        use_tpu=False,
        train_batch_size=32,
        init_fn=init_fn,
    )
    tpu.train(lambda params: ({"x": x}, y), steps=2)
    with pytest.raises(jaxspec.NanLossDuringTrainingError, match="at global step 3"):
        tpu.train(lambda params: ({"x": x}, y), steps=4)


def test_state_with_no_leaves_and_variable_names(tmp_path):
    """EST-30: names before training raise; a state {'one': 1, 'three': 3} lists exactly
    one, three and global_step; an init_fn-less model (empty state) still checkpoints."""
    x, y = digits(8)

    def model_fn(features, labels, mode, state):
        loss = jnp.mean(features["x"]) * state["one"] + state["three"]
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state)

    est = jaxspec.Estimator(
        model_fn,
        config=fast_config(str(tmp_path / "a")),
        init_fn=lambda: {"one": jnp.float32(1.0), "three": jnp.float32(3.0)},
    )
    with pytest.raises(ValueError, match="checkpoint"):
        est.get_variable_names()
    est.train(lambda: ({"x": x}, y), steps=2)
    assert sorted(est.get_variable_names()) == ["global_step", "one", "three"]
    assert (est.get_variable_value("one"), est.get_variable_value("three")) == (1.0, 3.0)
    assert est.get_variable_value("global_step") == 2

    def stateless(features, labels, mode):
        return jaxspec.EstimatorSpec(mode, loss=jnp.mean(features["x"]), train_op={})

    empty = jaxspec.Estimator(stateless, config=fast_config(str(tmp_path / "b")))
    empty.train(lambda: ({"x": x}, y), steps=3)
    empty.train(lambda: ({"x": x}, y), steps=1)
    assert empty.get_variable_names() == ["global_step"] and empty.get_variable_value("global_step") == 4
