"""Issue 25, item 9: TPUEstimator keeps each replica's own update when the gradients are
not reduced across replicas, and says so once per call; with CrossShardOptimizer the
copies stay equal and nothing is said."""

from __future__ import annotations

import logging

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
