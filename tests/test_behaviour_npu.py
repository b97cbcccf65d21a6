"""jaxspec.NPUEstimator with NPUEstimatorSpec model_fns (Ascend's adapter behaviour):
config rules, spec types, host_call once per step, iterations_per_loop on device."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, NPUEstimatorSpec, NPURunConfig


def init_fn():
    return {"w": jnp.zeros((), jnp.float32)}


def make_model_fn(calls, spec_cls=NPUEstimatorSpec):
    def host_fn(global_step, x_sum):
        calls.append((int(global_step), float(x_sum)))

    def model_fn(features, labels, mode, state, global_step):
        host_call = (host_fn, [global_step, jnp.sum(features["x"])])
        if mode == ModeKeys.PREDICT:
            return spec_cls(mode, predictions={"y": features["x"] * state["w"]}, host_call=host_call)
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((features["x"] * w - labels) ** 2))(state["w"])
        train_op = {"w": state["w"] - 0.1 * grad} if mode == ModeKeys.TRAIN else None
        return spec_cls(mode, loss=loss, train_op=train_op, host_call=host_call)

    return model_fn


def input_fn(n):
    """n batches; batch i holds x = [i, i] (so each step's tensors differ)."""

    def fn():
        for i in range(n):
            yield {"x": np.full((2,), i, np.float32)}, np.ones((2,), np.float32)

    return fn


def config(tmp_path, **kwargs):
    return NPURunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        **kwargs,
    )


class CountingHook(jaxspec.SessionRunHook):
    def __init__(self):
        self.before = 0

    def before_run(self, run_context):
        self.before += 1


def test_npu_estimator_needs_an_npu_run_config(tmp_path):
    for bad in (None, jaxspec.RunConfig(model_dir=str(tmp_path))):
        with pytest.raises(ValueError, match="NPURunConfig"):
            jaxspec.NPUEstimator(make_model_fn([]), config=bad)
    est = jaxspec.NPUEstimator(make_model_fn([]), config=config(tmp_path), init_fn=init_fn)
    assert est.model_dir == str(tmp_path) and isinstance(est.config, NPURunConfig)


def test_npu_host_call_once_per_step_with_iterations_per_loop(tmp_path):
    calls, hook = [], CountingHook()
    est = jaxspec.NPUEstimator(
        make_model_fn(calls), config=config(tmp_path, iterations_per_loop=3), init_fn=init_fn
    )
    est.train(input_fn(6), hooks=[hook], steps=6)
    assert calls == [(i, 2.0 * i) for i in range(6)]  # once per step, in order, that step's tensors
    assert hook.before == 2  # 6 steps in 2 device loops of 3

    calls.clear()
    est.evaluate(input_fn(4))
    assert calls == [(6, 2.0 * i) for i in range(4)]

    calls.clear()
    preds = list(est.predict(lambda: {"x": np.ones((2,), np.float32)}))
    assert len(preds) == 2 and calls == []  # ignored in PREDICT


def test_npu_accepts_a_plain_estimator_spec(tmp_path):
    def model_fn(features, labels, mode, state):
        return EstimatorSpec(mode, loss=jnp.mean(features["x"]) + 0 * state["w"], train_op=state)

    jaxspec.NPUEstimator(model_fn, config=config(tmp_path), init_fn=init_fn).train(input_fn(2))


@pytest.mark.parametrize(
    "mode,error",
    [(ModeKeys.TRAIN, RuntimeError), (ModeKeys.EVAL, RuntimeError), (ModeKeys.PREDICT, ValueError)],
)
def test_npu_wrong_return_type(tmp_path, mode, error):
    est = jaxspec.NPUEstimator(lambda features, labels, mode: "not a spec", config=config(tmp_path))
    data = input_fn(1)
    with pytest.raises(error, match="EstimatorSpec.*str"):
        if mode == ModeKeys.TRAIN:
            est.train(data, steps=1)
        elif mode == ModeKeys.EVAL:
            est.evaluate(data, steps=1)
        else:
            next(est.predict(lambda: {"x": np.ones((2,), np.float32)}))


def test_npu_rejects_a_tpu_spec_in_train(tmp_path):
    def model_fn(features, labels, mode, state):
        return jaxspec.TPUEstimatorSpec(mode, loss=jnp.mean(features["x"]), train_op=state)

    est = jaxspec.NPUEstimator(model_fn, config=config(tmp_path), init_fn=init_fn)
    with pytest.raises(RuntimeError, match="TPUEstimatorSpec"):
        est.train(input_fn(1), steps=1)
