"""A RunPlan built by hand runs a training loop without any Estimator class."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.estimators._model_fn import ModelFnCaller, estimator_spec_check
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.train import run_train
from jaxspec.store.checkpoints import CheckpointStore

LR = 0.1


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 8, 3)).astype(np.float32)  # 5 batches of 8 rows
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)
    return x, y


def model_fn(features, labels, mode, state):
    def loss_of(s):
        pred = features["x"] @ s["w"] + s["b"]
        return jnp.mean((pred - labels) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(state)
    new_state = jax.tree.map(lambda p, g: p - LR * g, state, grads)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new_state)


def init_fn():
    return {"w": jnp.zeros(3, jnp.float32), "b": jnp.zeros((), jnp.float32)}


def _plan(tmp_path, **changes) -> RunPlan:
    config = jaxspec.RunConfig(model_dir=str(tmp_path), log_step_count_steps=None, save_summary_steps=None)
    plan = RunPlan(
        mode=jaxspec.ModeKeys.TRAIN,
        model_fn=ModelFnCaller(model_fn, estimator_spec_check),
        init_fn=init_fn,
        config=config,
        store=CheckpointStore(str(tmp_path)),
    )
    return dataclasses.replace(plan, **changes)


def _numpy_sgd(x: np.ndarray, y: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    w, b = np.zeros(3, np.float64), 0.0
    for i in range(steps):
        err = x[i] @ w + b - y[i]
        w = w - LR * 2 * x[i].T @ err / len(err)
        b = b - LR * 2 * err.mean()
    return w, b


@pytest.mark.parametrize("iterations_per_loop", [1, 2])
def test_hand_built_plan_trains_like_numpy(tmp_path, iterations_per_loop):
    x, y = _data()
    batches = lambda: iter([({"x": x[i]}, y[i]) for i in range(len(x))])  # noqa: E731
    plan = _plan(tmp_path, iterations_per_loop=iterations_per_loop)
    run_train(plan, batches, hooks=None, steps=5, max_steps=None, saving_listeners=None)
    store = plan.store
    assert store.latest_step() == 5
    saved = store.read()
    w, b = _numpy_sgd(x.astype(np.float64), y.astype(np.float64), 5)
    np.testing.assert_allclose(saved["w"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saved["b"], b, rtol=1e-5, atol=1e-6)


def test_plan_is_immutable_and_hands_out_copies(tmp_path):
    plan = _plan(tmp_path, input_params={"batch_size": 8, "nested": {"a": 1}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.mode = jaxspec.ModeKeys.EVAL
    with pytest.raises(TypeError):
        plan.input_params["batch_size"] = 4
    given = plan.params_for_input_fn()
    given["nested"]["a"] = 2
    assert plan.input_params["nested"]["a"] == 1
    assert plan.input_batch_size == 8 and plan.model_batch_size is None
    assert plan.model_dir == str(tmp_path) and not plan.broadcast
