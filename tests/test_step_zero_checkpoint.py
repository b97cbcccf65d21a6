"""Issue 25, item 4: a train call that starts with no checkpoint saves one at its first
global step, as tf.estimator's CheckpointSaverHook does when its session is created, so a
NaN at step 9 or an input error at batch 13 leaves a checkpoint to look at and resume
from (with the default checkpoint cadence, nothing else is saved by then)."""

from __future__ import annotations

import logging

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxspec
from tests.helpers import digits, init_fn, make_model_fn


def _estimator(model_dir: str, model_fn=None) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(model_dir=model_dir, log_step_count_steps=None)  # default cadence
    return jaxspec.Estimator(
        model_fn or make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn
    )


def _nan_at_step_9(features, labels, mode, params, state, global_step):
    logits = state.apply_fn(state.params, features["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    loss = jnp.where(global_step == 8, jnp.nan, loss)  # the 9th step
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.replace(step=state.step + 1))


def test_nan_at_step_9_leaves_the_step_0_checkpoint(tmp_path, caplog):
    x, y = digits(32)
    est = _estimator(str(tmp_path), _nan_at_step_9)
    with caplog.at_level(logging.INFO, logger="jaxspec"), pytest.raises(jaxspec.NanLossDuringTrainingError):
        est.train(lambda: ({"x": x}, y), steps=20)
    store = est._checkpoint_store()
    assert store.all_steps() == [0]
    assert "Saving checkpoints for 0 into" in caplog.text
    # it holds the initial state: init_fn's, from the same seed
    initial = init_fn(None, {"x": x})
    np.testing.assert_allclose(
        store.read(0)["params/params/Dense_0/kernel"],
        np.asarray(initial.params["params"]["Dense_0"]["kernel"]),
    )


def test_input_error_at_batch_13_leaves_a_checkpoint_to_resume_from(tmp_path):
    x, y = digits(32)

    def failing():
        for i in range(100):
            if i == 13:
                raise OSError("the input's file went away")
            yield {"x": x}, y

    est = _estimator(str(tmp_path))
    with pytest.raises(OSError, match="went away"):
        est.train(failing, steps=50)
    assert est._checkpoint_store().all_steps() == [0]
    est.train(lambda: ({"x": x}, y), steps=2)  # a later call resumes from it
    assert est.get_variable_value("global_step") == 2


def test_a_resumed_call_does_not_write_its_step_again(tmp_path, caplog):
    x, y = digits(32)
    est = _estimator(str(tmp_path))
    est.train(lambda: ({"x": x}, y), steps=3)
    assert est._checkpoint_store().all_steps() == [0, 3]
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        resumed = _estimator(str(tmp_path)).train(lambda: ({"x": x}, y), steps=2)
    assert resumed._checkpoint_store().all_steps() == [0, 3, 5]
    assert "Saving checkpoints for 3 " not in caplog.text
