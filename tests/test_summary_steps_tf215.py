"""The Estimator's training summaries and log lines come at TF 2.15's steps, with its
values: ``loss`` and ``learning_rate`` (an ``optax.inject_hyperparams`` rate, as a
model_fn's ``tf.compat.v1.summary.scalar`` of a decayed rate reads) at the call's first
step and every ``save_summary_steps`` after it, ``global_step/sec`` where
``log_step_count_steps`` steps have passed since the last measurement, and the
``loss = ..., step = ...`` lines (tests/data/tf215_summary_steps.json, from
tools/tf215_summary_steps.py run under TF 2.15). Loops are grouped (a plain Estimator's
default), so every summary step inside a group is written too."""

from __future__ import annotations

import json
import logging
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import jaxspec

with open(os.path.join(os.path.dirname(__file__), "data", "tf215_summary_steps.json")) as _f:
    REFERENCE = json.load(_f)["runs"]

TX = optax.inject_hyperparams(optax.sgd)(learning_rate=optax.exponential_decay(0.1, 1, 0.9))


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)  # the tool's data
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32) + 0.3).astype(np.float32)
    return x, y


def input_fn():
    x, y = _data()

    def batches():
        while True:
            for s in range(0, 32, 8):
                yield {"x": x[s : s + 8]}, y[s : s + 8]

    return batches()


def init_fn():
    params = {"w": jnp.zeros(4, jnp.float32), "b": jnp.zeros((), jnp.float32)}
    return {"params": params, "opt": TX.init(params)}


def model_fn(features, labels, mode, state):
    def loss_of(p):
        return jnp.mean((features["x"] @ p["w"] + p["b"] - labels) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(state["params"])
    updates, opt = TX.update(grads, state["opt"], state["params"])
    new = {"params": optax.apply_updates(state["params"], updates), "opt": opt}
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_summary_steps_values_and_lines_match_tf215(tmp_path, caplog, name):
    ref = REFERENCE[name]
    config = jaxspec.RunConfig(
        save_summary_steps=ref["save_summary_steps"], log_step_count_steps=ref["log_step_count_steps"]
    )
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        for max_steps in ref["max_steps"]:  # a new Estimator per call, as TF's tool
            jaxspec.Estimator(model_fn, str(tmp_path), config=config, init_fn=init_fn).train(
                input_fn, max_steps=max_steps
            )
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = events.Tags()["scalars"]
    got = {t: [(e.step, e.value) for e in events.Scalars(t)] if t in tags else [] for t in ref["scalars"]}
    for tag, want in ref["scalars"].items():
        assert [s for s, _ in got[tag]] == [s for s, _ in want], tag
    for tag in ("loss", "learning_rate"):
        np.testing.assert_allclose(
            [v for _, v in got[tag]], [v for _, v in ref["scalars"][tag]], rtol=2e-4, err_msg=tag
        )
    rates = got["global_step/sec"]
    examples = [(e.step, e.value) for e in events.Scalars("examples/sec")] if "examples/sec" in tags else []
    assert [s for s, _ in examples] == [s for s, _ in rates]
    for (_, per_step), (_, per_example) in zip(rates, examples, strict=True):
        assert per_example == pytest.approx(8 * per_step, rel=1e-6)  # a plain Estimator's batch of 8
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert [int(s) for s in re.findall(r"^loss = \S+, step = (\d+)", text, re.M)] == ref["loss_line_steps"]
    assert len(re.findall(r"^global_step/sec: ", text, re.M)) == ref["global_step_sec_lines"]
