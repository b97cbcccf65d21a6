"""behaviour-cases.md, section EST (construction, model_fn arguments, input_fn/model_fn
plumbing), case by case. Most cases need no compilation; the few that train use a
one-weight linear model."""

from __future__ import annotations

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys

X = np.array([[1.0], [2.0]], np.float32)
Y = np.array([[2.0], [4.0]], np.float32)


def init_fn():
    return {"w": jnp.zeros((), jnp.float32)}


def linear_model_fn(features, labels, mode, state):
    """loss = mean((x w - y)^2); one SGD step of 0.1."""

    def loss_of(w):
        return jnp.mean((features["x"] * w - labels) ** 2)

    if mode == ModeKeys.PREDICT:
        return EstimatorSpec(mode, predictions={"y": features["x"][:, 0] * state["w"]})
    loss, grad = jax.value_and_grad(loss_of)(state["w"])
    return EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] - 0.1 * grad})


def config(tmp_path, **kwargs):
    return jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        **kwargs,
    )


# -- construction and model_fn argument validation ---------------------------------------


def test_est_02_config_is_checked_before_model_fn():
    with pytest.raises(ValueError, match="config must be a jaxspec.RunConfig"):
        jaxspec.Estimator(model_fn=None, config="not a RunConfig")
    with pytest.raises(ValueError, match="model_fn is required"):
        jaxspec.Estimator(model_fn=None)


def test_est_03_properties(tmp_path):
    class MyConfig(jaxspec.RunConfig):
        pass

    def model_fn(features, labels, params):
        return None

    params = {"hidden_layers": [3, 4]}
    est = jaxspec.Estimator(model_fn, model_dir=str(tmp_path), config=MyConfig(), params=params)
    assert isinstance(est.config, MyConfig)
    assert est.params == params and est.model_dir == str(tmp_path) == est.config.model_dir


@pytest.mark.parametrize("model_dir", [None, ""])
def test_est_04_temporary_model_dir(model_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est = jaxspec.Estimator(linear_model_fn, model_dir=model_dir, init_fn=init_fn)
    assert os.path.isdir(est.model_dir) and est.config.model_dir == est.model_dir
    assert any("temporary" in r.getMessage() and est.model_dir in r.getMessage() for r in caplog.records)
    other = jaxspec.Estimator(linear_model_fn, init_fn=init_fn)
    assert other.model_dir != est.model_dir


def test_est_05_model_dir_from_constructor_config_or_both(tmp_path):
    here, there = str(tmp_path / "a"), str(tmp_path / "b")
    for est in (
        jaxspec.Estimator(linear_model_fn, model_dir=here, init_fn=init_fn),
        jaxspec.Estimator(linear_model_fn, config=jaxspec.RunConfig(model_dir=here), init_fn=init_fn),
        jaxspec.Estimator(
            linear_model_fn, model_dir=here, config=jaxspec.RunConfig(model_dir=here), init_fn=init_fn
        ),
    ):
        assert est.model_dir == est.config.model_dir == here
    with pytest.raises(ValueError, match="model_dir .*different"):
        jaxspec.Estimator(
            linear_model_fn, model_dir=here, config=jaxspec.RunConfig(model_dir=there), init_fn=init_fn
        )


def test_est_06_features_argument(tmp_path):
    def no_features(x, labels):
        return None

    with pytest.raises(ValueError, match="'features'"):
        jaxspec.Estimator(no_features, model_dir=str(tmp_path))

    def features_only(features):
        return None

    assert jaxspec.Estimator(features_only, model_dir=str(tmp_path)).model_fn.user_model_fn is features_only


def test_est_07_params_given_but_not_accepted(tmp_path):
    def no_params(features, labels):
        return None

    class CallableNoParams:
        def __call__(self, features, labels):
            return None

    for model_fn in (no_params, CallableNoParams()):
        with pytest.raises(ValueError, match="'params'"):
            jaxspec.Estimator(model_fn, model_dir=str(tmp_path), params={"lr": 0.1})
        jaxspec.Estimator(model_fn, model_dir=str(tmp_path))


def test_est_08_params_are_deep_copied(tmp_path):
    def model_fn(features, params):
        return None

    params = {"layers": [1, 2], "lr": 0.1}
    est = jaxspec.Estimator(model_fn, model_dir=str(tmp_path), params=params)
    params["lr"] = 5.0
    params["layers"].append(3)
    assert est.params == {"layers": [1, 2], "lr": 0.1}


def test_est_09_unexpected_arguments(tmp_path):
    def model_fn(features, labels, something):
        return None

    with pytest.raises(ValueError, match="'something'"):
        jaxspec.Estimator(model_fn, model_dir=str(tmp_path))
    jaxspec.Estimator(lambda features, labels: model_fn(features, labels, None), model_dir=str(tmp_path))

    class Model:
        def model_fn(self, features, labels, mode):
            return None

    jaxspec.Estimator(Model().model_fn, model_dir=str(tmp_path))


# -- input_fn / model_fn plumbing ---------------------------------------------------------


class CountingInputFn:
    def __init__(self):
        self.calls = []

    def __call__(self, mode, params, config):
        self.calls.append((mode, params, config))
        if mode == ModeKeys.PREDICT:
            return {"x": X}
        return {"x": X}, Y


class CountingModelFn:
    def __init__(self):
        self.calls = 0

    def __call__(self, features, labels, mode, params, state):
        self.calls += 1
        return linear_model_fn(features, labels, mode, state)


def test_est_12_input_fn_and_model_fn_calls(tmp_path):
    input_fn, model_fn = CountingInputFn(), CountingModelFn()
    est = jaxspec.Estimator(model_fn, config=config(tmp_path), params={"p": 1}, init_fn=init_fn)
    assert input_fn.calls == [] and model_fn.calls == 0
    est.train(input_fn, steps=1)
    assert model_fn.calls == 1
    est.evaluate(input_fn, steps=1)
    predictions = est.predict(input_fn)
    assert [c[0] for c in input_fn.calls] == [ModeKeys.TRAIN, ModeKeys.EVAL]
    first = next(predictions)
    assert [c[0] for c in input_fn.calls] == [ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT]
    assert set(first) == {"y"} and len(list(predictions)) == 1
    for _, params, cfg in input_fn.calls:
        assert params == {"p": 1} and cfg is est.config


def test_est_13_features_only_and_labels_not_accepted(tmp_path):
    seen = []

    def features_only(features):
        seen.append(sorted(features))
        loss = jnp.mean(features["x"])
        return EstimatorSpec(ModeKeys.TRAIN, loss=loss, train_op={"w": loss})

    est = jaxspec.Estimator(features_only, config=config(tmp_path / "a"), init_fn=init_fn)
    est.train(lambda: {"x": X, "z": Y}, steps=2)
    assert seen and seen[0] == ["x", "z"] and float(est.get_variable_value("w")) == 1.5

    est = jaxspec.Estimator(features_only, config=config(tmp_path / "b"), init_fn=init_fn)
    with pytest.raises(ValueError, match="input_fn returned labels.*'labels'"):
        est.train(lambda: ({"x": X}, Y), steps=1)


def test_est_14_input_fn_tuples(tmp_path):
    est = jaxspec.Estimator(linear_model_fn, config=config(tmp_path / "a"), init_fn=init_fn)
    with pytest.raises(ValueError, match="input_fn"):
        est.train(lambda: ({"x": X}, Y, Y), steps=1)

    def nested_model_fn(features, labels, mode, state):
        (a, b), w = features, state["w"]
        loss = jnp.mean((a * w + b - labels) ** 2)
        return EstimatorSpec(
            mode,
            loss=loss,
            train_op={"w": w - 0.1 * jax.grad(lambda v: jnp.mean((a * v + b - labels) ** 2))(w)},
        )

    def input_fn():
        while True:
            yield (X, X), Y

    nested = jaxspec.Estimator(nested_model_fn, config=config(tmp_path / "b"), init_fn=init_fn)
    nested.train(input_fn, steps=4)
    assert nested.latest_checkpoint().endswith("4")


@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
def test_est_15_model_fn_returns_a_string(tmp_path, mode):
    est = jaxspec.Estimator(lambda features, labels: "not a spec", config=config(tmp_path))
    run = est.train if mode == ModeKeys.TRAIN else est.evaluate
    with pytest.raises(ValueError, match="must return an EstimatorSpec.*str"):
        run(lambda: ({"x": X}, Y), steps=1)


def test_est_15_plain_estimator_rejects_a_tpu_spec(tmp_path):
    def model_fn(features, labels, mode):
        return jaxspec.TPUEstimatorSpec(mode, loss=jnp.mean(features["x"]), train_op={})

    est = jaxspec.Estimator(model_fn, config=config(tmp_path))
    with pytest.raises(ValueError, match="must return an EstimatorSpec.*TPUEstimatorSpec"):
        est.train(lambda: ({"x": X}, Y), steps=1)


def test_est_16_spec_with_mode_none_trains(tmp_path):
    def model_fn(features, labels, state):
        spec = linear_model_fn(features, labels, ModeKeys.TRAIN, state)
        return EstimatorSpec(None, loss=spec.loss, train_op=spec.train_op, predictions={"p": features["x"]})

    est = jaxspec.Estimator(model_fn, config=config(tmp_path), init_fn=init_fn)
    est.train(lambda: ({"x": X}, Y), steps=2)
    assert est.latest_checkpoint().endswith("2")
    assert float(est.get_variable_value("w")) > 0.0


# -- train/evaluate/predict argument checks (made by the loop; asserted here as contract) ---


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"steps": 0}, "steps"),
        ({"steps": -1}, "steps"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": -1}, "max_steps"),
    ],
)
def test_est_19_steps_must_be_positive(tmp_path, kwargs, field):
    est = jaxspec.Estimator(linear_model_fn, config=config(tmp_path), init_fn=init_fn)
    with pytest.raises(ValueError, match=rf"{field} must be > 0"):
        est.train(lambda: ({"x": X}, Y), **kwargs)


def test_est_25_hooks_passed_to_a_phase_must_be_hooks(tmp_path):
    est = jaxspec.Estimator(linear_model_fn, config=config(tmp_path), init_fn=init_fn)
    data = lambda: ({"x": X}, Y)  # noqa: E731
    with pytest.raises(TypeError, match="SessionRunHook.*str"):
        est.train(data, hooks=["not a hook"], steps=1)
    with pytest.raises(TypeError, match="SessionRunHook.*str"):
        est.evaluate(data, hooks=["not a hook"], steps=1)
    predictions = est.predict(lambda: {"x": X}, hooks=["not a hook"])
    with pytest.raises(TypeError, match="SessionRunHook.*str"):
        next(predictions)
