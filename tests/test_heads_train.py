"""The JAX form of a head's TRAIN: the new state against gradients worked out by hand, the
regularization functions, update_ops, and on 8 replicas the psum with TF's
1/num_replicas scaling of a SUM_OVER_BATCH_SIZE loss (none for SUM)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jaxspec
from jaxspec import heads

RNG = np.random.default_rng(3)
X = RNG.normal(size=(16, 3)).astype(np.float32)
Y = RNG.normal(size=(16, 1)).astype(np.float32)
WEIGHTS = RNG.uniform(0.5, 2.0, size=(16, 1)).astype(np.float32)
W0 = RNG.normal(size=(3, 1)).astype(np.float32)
LR = 0.1


def _state() -> train_state.TrainState:
    return train_state.TrainState.create(apply_fn=None, params={"w": jnp.asarray(W0)}, tx=optax.sgd(LR))


def _hand_gradient(x, y, w, weights, reduction):
    """d/dw of sum(weights * (x @ w - y)**2), divided by the element count for
    SUM_OVER_BATCH_SIZE: ``2 x^T (weights * (x w - y)) / n``."""
    g = 2.0 * x.T @ (weights * (x @ w - y))
    return g if reduction == heads.Reduction.SUM else g / len(x)


@pytest.mark.parametrize("reduction", [heads.Reduction.SUM_OVER_BATCH_SIZE, heads.Reduction.SUM])
def test_optimizer_step_is_sgd_on_the_hand_gradient(reduction):
    head = heads.RegressionHead(weight_column="w", loss_reduction=reduction)
    state = _state()
    spec = head.create_estimator_spec(
        features={"w": WEIGHTS},
        mode=jaxspec.ModeKeys.TRAIN,
        logits=lambda p: X @ p["w"],
        labels=Y,
        optimizer=state.tx,
        trainable_variables=state,
    )
    new = spec.train_op
    assert int(new.step) == 1
    want = W0 - LR * _hand_gradient(X, Y, W0, WEIGHTS, reduction)
    np.testing.assert_allclose(np.asarray(new.params["w"]), want, rtol=1e-5, atol=1e-6)
    loss = np.sum(WEIGHTS * (X @ W0 - Y) ** 2) / (len(X) if reduction != heads.Reduction.SUM else 1)
    np.testing.assert_allclose(float(spec.loss), loss, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(spec.predictions["predictions"]), X @ W0, rtol=1e-5, atol=1e-6)


def test_regularization_function_is_differentiated_and_update_ops_run():
    head = heads.RegressionHead()
    state = _state()
    spec = head.create_estimator_spec(
        features={},
        mode=jaxspec.ModeKeys.TRAIN,
        logits=lambda p: X @ p["w"],
        labels=Y,
        trainable_variables=state,
        train_op_fn=lambda grads: state.apply_gradients(grads=grads),
        update_ops=[lambda s: s.replace(step=s.step + 10)],
        regularization_losses=[lambda p: 0.5 * jnp.sum(p["w"] ** 2), jnp.float32(0.25)],
    )
    grad = _hand_gradient(X, Y, W0, np.ones_like(WEIGHTS), heads.Reduction.SUM_OVER_BATCH_SIZE) + W0
    np.testing.assert_allclose(np.asarray(spec.train_op.params["w"]), W0 - LR * grad, rtol=1e-5, atol=1e-6)
    assert int(spec.train_op.step) == 11
    want = np.mean((X @ W0 - Y) ** 2) + 0.5 * np.sum(W0**2) + 0.25
    np.testing.assert_allclose(float(spec.loss), want, rtol=1e-5)


@pytest.mark.parametrize("check_vma", [False, True])
@pytest.mark.parametrize("reduction", [heads.Reduction.SUM_OVER_BATCH_SIZE, heads.Reduction.SUM])
def test_eight_replicas_sum_gradients_with_tf_scaling(reduction, check_vma):
    """Each replica sees 2 rows; the head's psum (after 1/8 for SUM_OVER_BATCH_SIZE)
    gives every replica the one-device step on all 16 rows; with ``check_vma`` JAX has
    summed a replicated parameter's gradient already and the head does not sum again."""
    head = heads.RegressionHead(weight_column="w", loss_reduction=reduction)
    mesh = Mesh(np.array(jax.devices()[:8]), ("replica",))
    assert mesh.size == 8

    def step(x, y, w):
        state = _state()
        spec = head.create_tpu_estimator_spec(
            features={"w": w},
            mode=jaxspec.ModeKeys.TRAIN,
            logits=lambda p: x @ p["w"],
            labels=y,
            optimizer=state.tx,
            trainable_variables=state,
        )
        return spec.train_op.params["w"][None], spec.loss[None]

    sharded = jax.jit(
        jax.shard_map(
            step,
            mesh=mesh,
            in_specs=(P("replica"),) * 3,
            out_specs=(P("replica"), P("replica")),
            check_vma=check_vma,
        )
    )
    new_w, losses = sharded(X, Y, WEIGHTS)
    want = W0 - LR * _hand_gradient(X, Y, W0, WEIGHTS, reduction)
    for replica in range(8):
        np.testing.assert_allclose(np.asarray(new_w[replica]), want, rtol=1e-5, atol=1e-6)
    # Each replica's reported loss is its own batch's, unscaled (as TF's spec.loss).
    rows = slice(0, 2)
    mine = np.sum(WEIGHTS[rows] * (X[rows] @ W0 - Y[rows]) ** 2) / (
        2 if reduction != heads.Reduction.SUM else 1
    )
    np.testing.assert_allclose(float(losses[0]), mine, rtol=1e-5)


def test_train_requires_the_jax_form():
    head = heads.BinaryClassHead()
    logits = jnp.zeros((4, 1))
    labels = jnp.zeros((4, 1), jnp.int32)
    with pytest.raises(TypeError, match="function params -> logits"):
        head.create_estimator_spec(
            features={},
            mode="train",
            logits=logits,
            labels=labels,
            trainable_variables=logits,
            train_op_fn=lambda g: g,
        )
    with pytest.raises(ValueError, match="params and opt_state"):
        head.create_estimator_spec(
            features={},
            mode="train",
            logits=lambda p: p,
            labels=labels,
            trainable_variables=logits,
            optimizer=optax.sgd(1.0),
        )
