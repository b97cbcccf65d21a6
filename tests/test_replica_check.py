"""Issue 25, item 9: TPUEstimator keeps each replica's own update when the gradients are
not reduced across replicas, and says so once per call; with CrossShardOptimizer the
copies stay equal and nothing is said."""

from __future__ import annotations

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from tests.helpers import Net, digits, fast_config, make_model_fn


def _init_fn(reduce: bool):
    def init_fn(rng, features):
        model = Net()
        params = model.init(jax.random.PRNGKey(42), jnp.asarray(features["x"][:1]))
        tx = optax.sgd(0.1)
        return train_state.TrainState.create(
            apply_fn=model.apply, params=params, tx=jaxspec.CrossShardOptimizer(tx) if reduce else tx
        )

    return init_fn


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if "replicas' copies of the state differ" in r.getMessage()
    ]


@pytest.mark.parametrize("steps", [2, 6], ids=["one loop", "three loops"])
def test_replicas_that_diverge_are_named_once(tmp_path, caplog, steps):
    x, y = digits(64)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 2), train_batch_size=32, init_fn=_init_fn(False)
    )
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(lambda params: ({"x": x[:32]}, y[:32]), steps=steps)
    warned = _warnings(caplog)
    assert len(warned) == 1
    assert "params['params']['Dense_" in warned[0] and "CrossShardOptimizer" in warned[0]
    assert "global step 2" in warned[0]  # after the first loop
    # the semantics are kept: each replica trained on its own rows; the checkpoint is replica 0's
    assert est.get_variable_value("step") == steps


def test_reduced_gradients_keep_the_copies_equal_and_silent(tmp_path, caplog):
    x, y = digits(64)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 2), train_batch_size=32, init_fn=_init_fn(True)
    )
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(lambda params: ({"x": x[:32]}, y[:32]), steps=6)
    assert _warnings(caplog) == []
    assert np.isfinite(est.get_variable_value("params/params/Dense_0/kernel")).all()


class _BatchNormNet(nn.Module):
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Dense(8)(x)
        x = nn.BatchNorm(use_running_average=not train, axis_name=self.axis_name)(x)
        return nn.Dense(10)(x)


class _BatchNormState(train_state.TrainState):
    batch_stats: dict


def _batch_norm_estimator(path, axis_name):
    def init_fn(rng, features):
        variables = _BatchNormNet(axis_name).init(
            jax.random.PRNGKey(0), jnp.asarray(features["x"][:1]), False
        )
        return _BatchNormState.create(
            apply_fn=_BatchNormNet(axis_name).apply,
            params=variables["params"],
            batch_stats=variables["batch_stats"],
            tx=jaxspec.CrossShardOptimizer(optax.sgd(0.1)),  # the gradients are averaged
        )

    def model_fn(features, labels, mode, params, state):
        def loss_fn(p):
            logits, updates = state.apply_fn(
                {"params": p, "batch_stats": state.batch_stats}, features["x"], mutable=["batch_stats"]
            )
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), updates

        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        new = state.apply_gradients(grads=grads).replace(batch_stats=updates["batch_stats"])
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=new)

    config = fast_config(str(path), 2).replace(
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=2, replica_axis_name="data")
    )
    return jaxspec.TPUEstimator(model_fn, config=config, train_batch_size=32, init_fn=init_fn)


def test_batch_statistics_that_diverge_name_batch_norm_not_the_optimizer(tmp_path, caplog):
    """Issue 35, item 5: a leaf no gradient reaches is averaged by BatchNorm's axis_name
    (or a pmean over the replica axis), not by wrapping the optimizer (already wrapped)."""
    x, y = digits(32)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        _batch_norm_estimator(tmp_path / "apart", None).train(lambda params: ({"x": x}, y), steps=2)
    (warned,) = _warnings(caplog)
    assert ".batch_stats[" in warned and "No gradient reaches" in warned, warned
    assert "flax.linen.BatchNorm(axis_name='data')" in warned and "jax.lax.pmean(value, 'data')" in warned
    assert "wrap the optimizer" not in warned and "params']" not in warned, warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jaxspec"):  # the cure it names keeps them equal
        _batch_norm_estimator(tmp_path / "averaged", "data").train(lambda params: ({"x": x}, y), steps=2)
    assert _warnings(caplog) == []
