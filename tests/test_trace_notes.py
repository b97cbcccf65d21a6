"""Issue 25, item 8: an error raised inside model_fn's trace names the mode, the global
step and step of the call, and the batch leaves that differ from the first batch's; a
dtype or shape change that retraces logs one warning naming the leaf; a train_op of the
wrong structure names the first differing path, not the whole PyTreeDef."""

from __future__ import annotations

import logging

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from tests.helpers import fast_config


def _linear_model_fn(features, labels, mode, params, state):
    pred = features["x"].astype(jnp.float32) @ state["w"]
    loss = jnp.mean((pred - labels) ** 2)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] - 0.01 * state["w"]})


def _init_fn(rng, features):
    return {"w": jnp.ones((4,), jnp.float32)}


def _estimator(tmp_path, model_fn=_linear_model_fn) -> jaxspec.Estimator:
    return jaxspec.Estimator(model_fn, config=fast_config(str(tmp_path)), init_fn=_init_fn)


def _batches(widths, dtypes=None):
    def input_fn():
        for i, width in enumerate(widths):
            dtype = (dtypes or [np.float32] * len(widths))[i]
            yield (
                {"x": np.ones((8, width), dtype), "id": np.zeros((8,), np.int32)},
                np.zeros((8,), np.float32),
            )

    return input_fn


def test_a_width_change_at_batch_3_names_the_leaf_step_and_mode(tmp_path):
    est = _estimator(tmp_path)
    with pytest.raises(TypeError) as err:
        est.train(_batches([4, 4, 4, 5, 4]), steps=5)
    notes = "\n".join(getattr(err.value, "__notes__", []))
    assert "train" in notes and "global step 3" in notes and "step 3 of this call" in notes
    assert "features['x']: float32[8,5] (first batch: float32[8,4])" in notes
    assert "features['id']" not in notes  # unchanged leaves are not listed


def test_a_dtype_change_that_retraces_warns_once_naming_the_leaf(tmp_path, caplog):
    est = _estimator(tmp_path)
    dtypes = [np.float32, np.float32, np.int32, np.int32, np.float32, np.int32]
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(_batches([4] * 6, dtypes), steps=6)
    warned = [r.getMessage() for r in caplog.records if "traced again" in r.getMessage()]
    assert len(warned) == 1
    assert "features['x']: int32[8,4] (first batch: float32[8,4])" in warned[0]
    assert "global step 2" in warned[0]
    assert est.get_variable_value("global_step") == 6


def test_a_short_last_batch_retraces_without_a_warning(tmp_path, caplog):
    est = _estimator(tmp_path)

    def input_fn():
        for rows in (8, 8, 3):
            yield {"x": np.ones((rows, 4), np.float32)}, np.zeros((rows,), np.float32)

    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(input_fn, steps=3)
    assert "traced again" not in caplog.text  # one device: a short batch has its own shape


def test_an_error_in_the_first_trace_has_a_note_too(tmp_path):
    def broken(features, labels, mode, params, state):
        raise KeyError("no_such_feature")

    with pytest.raises(KeyError) as err:
        _estimator(tmp_path, broken).train(_batches([4]), steps=1)
    notes = "\n".join(getattr(err.value, "__notes__", []))
    assert "tracing model_fn (train)" in notes and "step 0 of this call" in notes


def test_a_train_op_of_the_wrong_structure_names_the_first_differing_path(tmp_path):
    def model_fn(features, labels, mode, params, state):
        loss = jnp.mean(features["x"] @ state["w"])
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"]})  # 'b' forgotten

    def init_fn(rng, features):
        return {"w": jnp.ones((4,)), "b": jnp.zeros(()), "opt": {"mu": jnp.zeros((4,))}}

    est = jaxspec.Estimator(model_fn, config=fast_config(str(tmp_path)), init_fn=init_fn)
    with pytest.raises(ValueError, match="tree structure of state") as err:
        est.train(_batches([4]), steps=1)
    message = str(err.value)
    assert "PyTreeDef" not in message
    assert "train_op lacks state's leaf ['b']" in message and "2 leaves missing" in message
