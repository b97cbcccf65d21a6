"""EMA weights (``jaxspec.ExponentialMovingAverage``): the state equals a numpy
recurrence over the per-step parameters (SGD on a linear model, by hand), evaluate and
predict use the averages, and a resumed or SIGTERM-interrupted run ends with the same
averages as an uninterrupted one."""

from __future__ import annotations

import os
import signal
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec

DECAY, LR, STEPS = 0.9, 0.1, 8
RNG = np.random.default_rng(0)
X = RNG.normal(size=(STEPS, 8, 3)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)
ema = jaxspec.ExponentialMovingAverage(DECAY)


def init_fn() -> Any:
    params = {"w": jnp.zeros((3,), jnp.float32), "b": jnp.float32(0.0)}
    ts = train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(LR))
    return {"ts": ts, "ema": ema.init(ts.params)}


def predict(params: Any, x: Any) -> Any:
    return x @ params["w"] + params["b"]


def model_fn(features, labels, mode, state, global_step):
    ts = state["ts"]
    if mode != jaxspec.ModeKeys.TRAIN:  # evaluate, predict and export the averages
        y = predict(ema.average(state["ema"]), features["x"])
        if mode == jaxspec.ModeKeys.PREDICT:
            return jaxspec.EstimatorSpec(mode, predictions={"y": y})
        return jaxspec.EstimatorSpec(mode, loss=jnp.mean((y - labels) ** 2))
    loss_fn = lambda p: jnp.mean((predict(p, features["x"]) - labels) ** 2)  # noqa: E731
    loss, grads = jax.value_and_grad(loss_fn)(ts.params)
    ts = ts.apply_gradients(grads=grads)
    return jaxspec.EstimatorSpec(
        mode, loss=loss, train_op={"ts": ts, "ema": ema.update(ts.params, state["ema"], global_step)}
    )


def numpy_run(steps: int = STEPS) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """SGD by hand, then TF's moving average over the parameters after each step."""
    w, b = np.zeros(3, np.float64), 0.0
    ema_w, ema_b = w.copy(), b
    for t in range(steps):
        err = X[t] @ w + b - Y[t]
        w, b = w - LR * 2 * X[t].T @ err / len(err), b - LR * 2 * err.mean()
        d = min(DECAY, (1 + t) / (10 + t))
        ema_w, ema_b = ema_w - (1 - d) * (ema_w - w), ema_b - (1 - d) * (ema_b - b)
    return {"w": w, "b": b}, {"w": ema_w, "b": ema_b}


def input_fn() -> Any:
    return iter([({"x": X[t]}, Y[t]) for t in range(STEPS)])


def estimator(model_dir: str) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(model_dir=model_dir, log_step_count_steps=None, save_checkpoints_steps=None)
    return jaxspec.Estimator(model_fn, config=config, init_fn=init_fn)


def _ema_of(est: jaxspec.Estimator) -> dict[str, np.ndarray]:
    return {k: est.get_variable_value(f"ema/average/{k}") for k in ("w", "b")}


def test_state_evaluate_and_predict_equal_numpy_with_the_averages(tmp_path: Any) -> None:
    est = estimator(str(tmp_path))
    est.train(input_fn, max_steps=STEPS)
    params, averages = numpy_run()
    np.testing.assert_allclose(est.get_variable_value("ts/params/w"), params["w"], rtol=1e-5)
    got = _ema_of(est)
    for k in ("w", "b"):
        np.testing.assert_allclose(got[k], averages[k], rtol=1e-5, atol=1e-7)
    x, y = X.reshape(-1, 3), Y.reshape(-1)
    by_hand = x @ averages["w"] + averages["b"]
    metrics = est.evaluate(lambda: iter([({"x": x}, y)]))
    np.testing.assert_allclose(metrics["loss"], np.mean((by_hand - y) ** 2), rtol=1e-5)
    predicted = np.array([p["y"] for p in est.predict(lambda: iter([{"x": x}]))])
    np.testing.assert_allclose(predicted, by_hand, rtol=1e-5, atol=1e-6)
    assert not np.allclose(by_hand, x @ params["w"] + params["b"], rtol=1e-2)  # not the raw weights


class _SigtermAt(jaxspec.SessionRunHook):
    def __init__(self, step: int) -> None:
        self.step = step

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_context.session.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)  # the Estimator saves, then exits with 143


def test_resume_and_sigterm_give_the_uninterrupted_averages(tmp_path: Any) -> None:
    whole = estimator(str(tmp_path / "whole"))
    whole.train(input_fn, max_steps=STEPS)
    want = _ema_of(whole)
    split = str(tmp_path / "split")
    estimator(split).train(input_fn, max_steps=3)
    with pytest.raises(SystemExit) as stopped:  # SIGTERM after step 5: saved at 5
        estimator(split).train(
            lambda: iter([({"x": X[t]}, Y[t]) for t in range(3, STEPS)]), hooks=[_SigtermAt(5)]
        )
    assert stopped.value.code == 128 + signal.SIGTERM
    resumed = estimator(split)
    assert resumed.get_variable_value("global_step") == 5
    resumed.train(lambda: iter([({"x": X[t]}, Y[t]) for t in range(5, STEPS)]), max_steps=STEPS)
    for k, v in _ema_of(resumed).items():
        np.testing.assert_array_equal(v, want[k])


def test_decay_rule_and_checks() -> None:
    assert float(ema.decay_at(0)) == pytest.approx(0.1)
    assert float(ema.decay_at(1000)) == pytest.approx(DECAY)
    assert float(jaxspec.ExponentialMovingAverage(0.5, num_updates=False).decay_at(0)) == 0.5
    mixed = {"w": jnp.ones(2, jnp.bfloat16), "n": jnp.int32(3)}
    moved = ema.update({"w": jnp.zeros(2, jnp.bfloat16), "n": jnp.int32(7)}, ema.init(mixed), 1000)
    assert moved.average["w"].dtype == jnp.bfloat16 and int(moved.average["n"]) == 7  # ints copied
    np.testing.assert_allclose(np.asarray(moved.average["w"], np.float32), DECAY, rtol=1e-2)
    with pytest.raises(ValueError, match="decay"):
        jaxspec.ExponentialMovingAverage(1.5)
