"""A model whose state holds more than PREDICT reads (no tests here): an MLP trained with
Adam whose PREDICT serves an EMA copy of the weights, EVAL the raw weights. Shared by
tests/test_export_slim.py and tests/test_export_jax_artifact.py."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training import train_state

import jaxspec
from jaxspec.export import ClassificationOutput, PredictOutput

CLASSES = [f"digit_{i}" for i in range(10)]


class EmaState(train_state.TrainState):
    ema: Any = struct.field(pytree_node=True, default=None)


class Mlp(nn.Module):
    hidden: int = 32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(10)(nn.tanh(nn.Dense(self.hidden)(x)))


def make_init_fn(hidden: int, features: int = 64) -> Any:
    def init_fn(rng: jax.Array) -> EmaState:
        model = Mlp(hidden)
        params = model.init(rng, jnp.zeros((1, features)))["params"]
        return EmaState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2), ema=params)

    return init_fn


def model_fn(features, labels, mode, state):
    def logits_of(p):
        return state.apply_fn({"params": p}, features["x"])

    if mode == jaxspec.ModeKeys.PREDICT:
        logits = logits_of(state.ema)
        probs = jax.nn.softmax(logits)
        return jaxspec.EstimatorSpec(
            mode,
            predictions={"logits": logits},
            export_outputs={
                "serving_default": PredictOutput({"logits": logits}),
                "classify": ClassificationOutput(scores=probs, classes=np.asarray(CLASSES)),
            },
        )

    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(logits_of(p), labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    if mode == jaxspec.ModeKeys.EVAL:
        return jaxspec.EstimatorSpec(mode, loss=loss, predictions={"logits": logits_of(state.params)})
    new = state.apply_gradients(grads=grads)
    new = new.replace(ema=jax.tree.map(lambda e, p: 0.9 * e + 0.1 * p, state.ema, new.params))
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new)


def input_fn(x: np.ndarray, y: np.ndarray, batch: int) -> Any:
    def fn():
        def gen():
            while True:
                for s in range(0, len(x), batch):
                    yield {"x": x[s : s + batch]}, y[s : s + batch]

        return gen()

    return fn
