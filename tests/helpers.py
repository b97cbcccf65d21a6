"""A small model shared by the tests: a 2-layer MLP on the digits, trained with Adam."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import jaxspec


def digits(n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first n of scikit-learn's 1797 8x8 digits: x float32 [n, 64] in [0, 1], y int32 [n].

    Read from the CSV that ships inside scikit-learn (the file ``load_digits`` reads) without
    importing ``sklearn.datasets``, which costs every test subprocess seconds; where that file
    is not found, ``load_digits`` itself. tests/test_helpers_digits.py checks both agree.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    roots = list(spec.submodule_search_locations or []) if spec else []
    csv = [
        p for p in (os.path.join(r, "datasets", "data", "digits.csv.gz") for r in roots) if os.path.exists(p)
    ]
    if csv:
        table = np.loadtxt(csv[0], delimiter=",")
        x, y = table[:, :-1], table[:, -1]
    else:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
    return (x[:n] / 16.0).astype(np.float32), y[:n].astype(np.int32)


class Net(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(10)(nn.tanh(nn.Dense(16)(x)))


def init_fn(rng: jax.Array, features: Any) -> train_state.TrainState:
    model = Net()
    params = model.init(jax.random.PRNGKey(42), jnp.asarray(features["x"][:1]))
    return train_state.TrainState.create(
        apply_fn=model.apply, params=params, tx=jaxspec.CrossShardOptimizer(optax.adam(0.05))
    )


def make_model_fn(host_calls: list | None = None, as_estimator_spec: bool = False) -> Any:
    """model_fn returning TPUEstimatorSpecs (or their as_estimator_spec())."""

    def host_fn(global_step: np.ndarray, loss: np.ndarray) -> None:
        host_calls.append((global_step.copy(), loss.copy()))

    def model_fn(features, labels, mode, params, state, global_step):
        logits_of = lambda p: state.apply_fn(p, features["x"])  # noqa: E731
        if mode == jaxspec.ModeKeys.PREDICT:
            logits = logits_of(state.params)
            spec = jaxspec.TPUEstimatorSpec(
                mode, predictions={"logits": logits, "class_ids": jnp.argmax(logits, -1)}
            )
        else:

            def loss_fn(p):
                return optax.softmax_cross_entropy_with_integer_labels(logits_of(p), labels).mean()

            loss, grads = jax.value_and_grad(loss_fn)(state.params)
            if mode == jaxspec.ModeKeys.TRAIN:
                host = None if host_calls is None else (host_fn, [global_step[None], loss[None]])
                spec = jaxspec.TPUEstimatorSpec(
                    mode, loss=loss, train_op=state.apply_gradients(grads=grads), host_call=host
                )
            else:

                def metric_fn(labels, logits):
                    return {
                        "accuracy": jaxspec.metrics.accuracy(labels, jnp.argmax(logits, -1)),
                        "mean_label": jaxspec.metrics.mean(labels),
                    }

                spec = jaxspec.TPUEstimatorSpec(
                    mode, loss=loss, eval_metrics=(metric_fn, [labels, logits_of(state.params)])
                )
        return spec.as_estimator_spec() if as_estimator_spec else spec

    return model_fn


def batches_input_fn(x: np.ndarray, y: np.ndarray | None, batch: int, repeat: bool = False) -> Any:
    """input_fn yielding consecutive batches (cycling when ``repeat``)."""

    def input_fn():
        def gen():
            while True:
                for s in range(0, len(x), batch):
                    f = {"x": x[s : s + batch]}
                    yield f if y is None else (f, y[s : s + batch])
                if not repeat:
                    return

        return gen()

    return input_fn


def leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(v) for v in jax.tree.leaves(tree)]


def fast_config(model_dir: str, iterations_per_loop: int = 1, **kwargs: Any) -> jaxspec.RunConfig:
    """A RunConfig without periodic saves or logs."""
    settings = dict(
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
    )
    settings.update(kwargs)
    return jaxspec.RunConfig(
        model_dir=model_dir, tpu_config=jaxspec.TPUConfig(iterations_per_loop=iterations_per_loop), **settings
    )


@contextlib.contextmanager
def no_compilation_cache() -> Iterator[None]:
    """JAX's persistent compilation cache off inside the block (the suite runs with it on:
    conftest), for tests that count XLA compiles: a program read back from the cache is
    not compiled, and jax.monitoring reports no compile for it.

    The cache is first configured as an Estimator would (so no Estimator turns it on inside
    the block), then switched off and JAX's handle on it dropped; both come back after.
    """
    from jax.experimental.compilation_cache import compilation_cache

    from jaxspec.compilation_cache import ensure_compilation_cache

    ensure_compilation_cache()
    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()
