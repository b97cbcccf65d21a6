"""input_fn results of the wrong kind (issue 35, item 2): a bare array is a TypeError
naming it before init_fn runs; an input_fn that yields nothing is a warning naming it,
and training from nothing writes the step-0 checkpoint, as tf.estimator's session
creation did (``CheckpointSaverHook.after_create_session``)."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from tests.helpers import digits, fast_config, init_fn, make_model_fn

X, Y = digits(8)


def _model_fn(features, labels, mode, state):
    loss = jnp.mean((features["x"] @ state["w"] - labels) ** 2)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] - 0.1 * jax.grad(
        lambda w: jnp.mean((features["x"] @ w - labels) ** 2))(state["w"])})  # fmt: skip


def _no_batch_init(rng, params):
    return {"w": jax.random.normal(rng, (64,))}


@pytest.mark.parametrize("result", [X, jnp.asarray(X)], ids=["numpy", "jax"])
def test_a_bare_array_is_a_type_error_before_init_fn(tmp_path, result):
    called = []

    def init(rng, features):
        called.append(1)
        return init_fn(rng, features)

    est = jaxspec.Estimator(make_model_fn(), config=fast_config(str(tmp_path)), params={}, init_fn=init)
    with pytest.raises(TypeError) as err:
        est.train(lambda: result, steps=1)
    message = str(err.value)
    assert "returned a bare" in message and "(8, 64)" in message and "float32" in message, message
    assert "tf.data.Dataset" in message and "(features, labels)" in message and "{'x': array}" in message
    assert not called


def test_an_array_with_labels_still_trains(tmp_path):
    est = jaxspec.Estimator(
        _model_fn, config=fast_config(str(tmp_path)), init_fn=lambda rng: {"w": jnp.zeros(64)}
    )
    est.train(lambda: ({"x": X}, Y.astype(np.float32)), steps=1)
    assert int(est.get_variable_value("global_step")) == 1


def empty_input_fn():
    return iter([])


def test_an_empty_input_warns_and_writes_step_zero(tmp_path, caplog):
    est = jaxspec.Estimator(_model_fn, config=fast_config(str(tmp_path)), init_fn=_no_batch_init)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est.train(empty_input_fn, steps=5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("empty_input_fn gave no data" in w for w in warnings), warnings
    assert est.latest_checkpoint() is not None and est.latest_checkpoint().endswith("/0")
    assert int(est.get_variable_value("global_step")) == 0
    init_key = jax.random.split(jax.random.PRNGKey(0))[0]  # init_fn's key for tf_random_seed None
    expected = np.asarray(_no_batch_init(init_key, {})["w"])
    np.testing.assert_array_equal(est.get_variable_value("w"), expected)
    est.train(empty_input_fn, steps=5)  # a resume: nothing new on disk, still a warning
    assert est.latest_checkpoint().endswith("/0")


def test_an_empty_input_with_an_init_fn_needing_features_says_why(tmp_path, caplog):
    est = jaxspec.Estimator(make_model_fn(), config=fast_config(str(tmp_path)), params={}, init_fn=init_fn)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(empty_input_fn, steps=5)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "empty_input_fn gave no data" in warning and "init_fn takes features" in warning, warning
    assert est.latest_checkpoint() is None


@pytest.mark.parametrize("method", ["train", "evaluate", "predict"])
def test_data_given_instead_of_input_fn_is_a_type_error_naming_input_fn(tmp_path, method):
    """``train(iter(batches))``: the data where the function that returns it belongs
    (issue 48's trap) is a TypeError that names input_fn and says what to pass, before
    anything is written."""
    est = jaxspec.Estimator(make_model_fn(), config=fast_config(str(tmp_path)), params={}, init_fn=init_fn)
    batches = iter([({"x": X}, Y)])
    with pytest.raises(TypeError, match=r"input_fn must be a callable .* got a list_iterator.*lambda"):
        result = getattr(est, method)(batches)
        if method == "predict":
            next(result)
    assert est.latest_checkpoint() is None


def test_a_batch_missing_a_feature_key_is_named_in_one_warning(tmp_path, caplog):
    """A later batch without a key the first batch had (issue 48's trap) trains, as JAX
    can (one more compile), but says so once, naming the key, where it passed silently."""

    def model_fn(features, labels, mode, state):
        x = features["x"] + (features["b"] if "b" in features else 0.0)
        loss_of = lambda w: jnp.mean((x @ w - labels) ** 2)  # noqa: E731
        return jaxspec.EstimatorSpec(
            mode, loss=loss_of(state["w"]), train_op={"w": state["w"] - 0.1 * jax.grad(loss_of)(state["w"])}
        )

    y = Y.astype(np.float32)
    full, short = ({"x": X, "b": X}, y), ({"x": X}, y)
    est = jaxspec.Estimator(
        model_fn, config=fast_config(str(tmp_path)), init_fn=lambda rng: {"w": jnp.zeros(64)}
    )
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(lambda: iter([full, full, short, short, full, short]))
    lines = [r.getMessage() for r in caplog.records if "another structure" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "batch index 2" in lines[0] and "missing: features['b']" in lines[0] and "new: none" in lines[0]
    assert "compiled again" in lines[0]
    assert int(est.get_variable_value("global_step")) == 6
