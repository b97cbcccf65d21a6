"""The eval event files hold what TF 2.15's tf.estimator writes there: one event per
evaluation at its global step, with ``loss`` and each metric as scalars and no
``global_step`` scalar (tests/data/tf215_eval_events.json, from
tools/tf215_eval_events.py run under TF 2.15)."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import jaxspec

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "tf215_eval_events.json")


def model_fn(features, labels, mode, state):
    def loss_of(w):
        logits = features["x"] @ w
        return optax.sigmoid_binary_cross_entropy(logits, labels).mean(), logits

    (loss, logits), grad = jax.value_and_grad(loss_of, has_aux=True)(state["w"])
    metrics = {
        "accuracy": jaxspec.metrics.accuracy(labels, (logits > 0).astype(jnp.float32)),
        "mean_label": jaxspec.metrics.mean(labels),
    }
    return jaxspec.EstimatorSpec(
        mode, loss=loss, train_op={"w": state["w"] - 0.1 * grad}, eval_metric_ops=metrics
    )


def input_fn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    return [({"x": x[s : s + 8]}, y[s : s + 8]) for s in range(0, 32, 8)]


def test_eval_event_tags_and_steps_match_tf215(tmp_path):
    with open(REFERENCE) as f:
        reference = json.load(f)["evaluations"]
    est = jaxspec.Estimator(model_fn, str(tmp_path), init_fn=lambda: {"w": jnp.zeros(4, jnp.float32)})
    for steps in (2, 4):
        est.train(input_fn, max_steps=steps)
        est.evaluate(input_fn)
    events = EventAccumulator(os.path.join(str(tmp_path), "eval"))
    events.Reload()
    tags = events.Tags()["scalars"]
    got = [
        {
            "step": step,
            "scalar_tags": sorted(t for t in tags if any(e.step == step for e in events.Scalars(t))),
        }
        for step in sorted({e.step for t in tags for e in events.Scalars(t)})
    ]
    assert got == reference
    assert "global_step" not in tags
