"""Models for the model-parallel tests: a digits MLP and an attention-like einsum block,
with partition rules that split their kernels over 'core'."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import PartitionSpec as P

import jaxspec

MLP_RULES = [
    (r"Dense_0/kernel", P(None, "core")),
    (r"Dense_0/bias", P("core")),
    (r"Dense_1/kernel", P("core", None)),
]
ATTENTION_RULES = [
    (r"(query|key|value)", P(None, "core", None)),  # heads split over the cores
    (r"out", P("core", None, None)),
]


class Mlp(nn.Module):
    hidden: int = 32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = nn.Dense(self.hidden)(x)  # Dense_0 [64, hidden]; Dense_1 [hidden, 10]
        return nn.Dense(10)(nn.tanh(hidden))


class Attention(nn.Module):
    """Digits as 8 tokens of 8 pixels; multi-head self-attention written with einsum."""

    heads: int = 4
    head_dim: int = 8
    constrain: bool = False  # lay q, k, v out with their heads over the cores

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        tokens = x.reshape(x.shape[0], 8, 8)
        init = nn.initializers.lecun_normal()
        shape = (8, self.heads, self.head_dim)
        q, k, v = (
            jnp.einsum("btd,dhk->bthk", tokens, self.param(n, init, shape)) for n in ("query", "key", "value")
        )
        if self.constrain:
            q, k, v = jaxspec.with_sharding_constraint((q, k, v), P(None, None, "core", None))
        scores = jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(self.head_dim)
        mixed = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(scores, axis=-1), v)
        out = jnp.einsum("bthk,hkd->btd", mixed, self.param("out", init, (self.heads, self.head_dim, 8)))
        return nn.Dense(10)(nn.tanh(out.reshape(x.shape[0], 64)))


LOGICAL_AXIS_RULES = (("mlp", "core"), ("embed", None))


class BoxedMlp(nn.Module):
    """Mlp whose layout is flax partitioning metadata: logical names for the hidden
    kernel (mapped by LOGICAL_AXIS_RULES), mesh names for the rest."""

    bias_axes: tuple = ("core",)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel0 = nn.with_logical_partitioning(
            nn.initializers.lecun_normal(), ("embed", "mlp"), rules=LOGICAL_AXIS_RULES
        )
        bias0 = nn.with_partitioning(nn.initializers.zeros_init(), self.bias_axes)
        hidden = nn.Dense(32, kernel_init=kernel0, bias_init=bias0)(x)
        kernel1 = nn.with_partitioning(nn.initializers.lecun_normal(), ("core", None))
        return nn.Dense(10, kernel_init=kernel1)(nn.tanh(hidden))


def make_init_fn(module: nn.Module, lr: float = 0.05) -> Any:
    def init_fn(features: Any) -> train_state.TrainState:
        params = module.init(jax.random.PRNGKey(7), jnp.asarray(features["x"][:1]))
        return train_state.TrainState.create(
            apply_fn=module.apply, params=params, tx=jaxspec.CrossShardOptimizer(optax.adam(lr))
        )

    return init_fn


def make_model_fn(host_losses: list | None = None, as_estimator_spec: bool = False) -> Any:
    """TPUEstimatorSpecs; host_call gets the per-example training losses (concatenated
    over replicas, so equal across topologies)."""

    def model_fn(features, labels, mode, params, state):
        logits_of = lambda p: state.apply_fn(p, features["x"])  # noqa: E731
        if mode == jaxspec.ModeKeys.PREDICT:
            logits = logits_of(state.params)
            spec = jaxspec.TPUEstimatorSpec(mode, predictions={"logits": logits})
            return spec.as_estimator_spec() if as_estimator_spec else spec

        def loss_fn(p):
            per_example = optax.softmax_cross_entropy_with_integer_labels(logits_of(p), labels)
            return per_example.mean(), per_example

        (loss, per_example), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        if mode == jaxspec.ModeKeys.TRAIN:
            host = None
            if host_losses is not None:
                host = (lambda x: host_losses.append(np.array(x)), [per_example])
            spec = jaxspec.TPUEstimatorSpec(
                mode, loss=loss, train_op=state.apply_gradients(grads=grads), host_call=host
            )
        else:

            def metric_fn(labels, logits):
                return {
                    "accuracy": jaxspec.metrics.accuracy(labels, jnp.argmax(logits, -1)),
                    "mean_logit": jaxspec.metrics.mean(jnp.max(logits, -1)),
                }

            spec = jaxspec.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(metric_fn, [labels, logits_of(state.params)])
            )
        return spec.as_estimator_spec() if as_estimator_spec else spec

    return model_fn


def config(model_dir: str, cores: int | None, iterations_per_loop: int = 5, **tpu: Any) -> jaxspec.RunConfig:
    return jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(
            iterations_per_loop=iterations_per_loop, num_cores_per_replica=cores, **tpu
        ),
    )


def _copy(state: Any) -> Any:
    """A copy of ``state`` with the same shardings (the train loop donates the original)."""
    return jax.tree.map(lambda x: jax.device_put(x, x.sharding, may_alias=False), state)


class StateProbe(jaxspec.SessionRunHook):
    """Keeps copies of the state a hook sees after the session is created and at the end
    (copies: training donates the state to its next loop, as the hooks' docs say)."""

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.created = _copy(session.state)

    def end(self, session: Any) -> None:
        self.final = _copy(session.state)
