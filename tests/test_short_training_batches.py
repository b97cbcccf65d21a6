"""Issue 25, item 1: on the mesh a short training batch (an epoch's remainder, batched
without drop_remainder) is skipped with one warning per call, and training goes on: steps
and max_steps are reached while the input goes on, and the saved input position stays
right. The model sums the ids of the rows it trains on, so the trained rows are checked
against numpy."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from tests.helpers import fast_config

ROWS, BATCH = 20, 8  # batches of 8, 8, 4 per epoch; 8 replicas take 1 row each


def _model_fn(features, labels, mode, params, state):
    seen = jax.lax.psum(jnp.sum(features["id"]), "replica")  # every replica's rows
    loss = jnp.mean(features["id"]) * 0.0
    return jaxspec.TPUEstimatorSpec(
        mode, loss=loss, train_op={"total": state["total"] + seen, "steps": state["steps"] + 1}
    )


def _init_fn(rng, features):
    return {"total": jnp.zeros((), jnp.float32), "steps": jnp.zeros((), jnp.int32)}


def _estimator(model_dir: str, **config: object) -> jaxspec.TPUEstimator:
    return jaxspec.TPUEstimator(
        _model_fn,
        config=fast_config(model_dir, 2, **config),
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        init_fn=_init_fn,
    )


def _tf_data_input_fn(params):
    import tensorflow as tf

    ids = tf.data.Dataset.range(ROWS).map(lambda i: {"id": tf.cast(i, tf.float32)})
    return ids.batch(params["batch_size"]).repeat()  # no drop_remainder: 8, 8, 4, 8, 8, 4, ...


def _generator_input_fn(params):
    def gen():
        while True:
            for s in range(0, ROWS, params["batch_size"]):
                yield {"id": np.arange(s, min(s + params["batch_size"], ROWS), dtype=np.float32)}

    return gen()


def _full_batches() -> list[np.ndarray]:
    """The full batches of the repeated input, in order (the short ones left out)."""
    epoch = [np.arange(s, s + BATCH) for s in range(0, ROWS - BATCH + 1, BATCH)]
    return epoch * 100


def _skip_warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "Skipped" in r.getMessage()
    ]


@pytest.mark.parametrize("input_fn", [_tf_data_input_fn, _generator_input_fn], ids=["tf.data", "generator"])
def test_max_steps_is_reached_and_short_batches_are_skipped(tmp_path, caplog, input_fn):
    est = _estimator(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(input_fn, max_steps=7)
    assert int(est.get_variable_value("steps")) == 7
    assert est.get_variable_value("total") == pytest.approx(sum(b.sum() for b in _full_batches()[:7]))
    warnings = _skip_warnings(caplog)
    assert len(warnings) == 1  # one per call, though three short batches were skipped
    assert "4 rows" in warnings[0] and "drop_remainder=True" in warnings[0]
    assert "repeat the data" not in caplog.text


def test_train_and_evaluate_reaches_max_steps(tmp_path):
    est = _estimator(str(tmp_path), save_checkpoints_steps=4)

    def eval_fn(params):
        return {"id": np.arange(params["batch_size"], dtype=np.float32)}

    jaxspec.train_and_evaluate(
        est,
        jaxspec.TrainSpec(_tf_data_input_fn, max_steps=9),
        jaxspec.EvalSpec(eval_fn, steps=1, throttle_secs=0),
    )
    assert int(est.get_variable_value("steps")) == 9
    assert est.get_variable_value("global_step") == 9


def test_saved_input_position_counts_the_skipped_batch(tmp_path):
    """Steps 1-3 train batches 0, 1, (skip the short one), 3; the resumed call's first step
    is batch 4 (rows 8..15), whatever was skipped before the checkpoint."""
    model_dir = str(tmp_path)
    _estimator(model_dir).train(_tf_data_input_fn, steps=3)
    est = _estimator(model_dir)
    est.train(_tf_data_input_fn, steps=2)
    assert est.get_variable_value("total") == pytest.approx(sum(b.sum() for b in _full_batches()[:5]))


def test_a_finite_input_ending_in_a_short_batch_trains_every_full_batch(tmp_path, caplog):
    est = _estimator(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est.train(lambda params: _tf_data_input_fn(params).take(6), max_steps=100)  # two epochs
    assert int(est.get_variable_value("steps")) == 4
    assert len(_skip_warnings(caplog)) == 1
