"""Gradient accumulation (``jaxspec.microbatched_value_and_grad``): the same value and
gradient as ``jax.value_and_grad`` on the whole batch; in a TPUEstimator, 1 and 4
microbatches train to the same parameters, steps, checkpoints and losses, and the
gradient is still reduced over replicas once per step."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from jaxspec.mode_keys import ModeKeys


def _mlp(params: Any, x: Any) -> Any:
    return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]


def _loss(params: Any, x: Any, y: Any) -> Any:
    return jnp.mean((_mlp(params, x) - y) ** 2)


def _params(dtype: Any = jnp.float32) -> dict[str, Any]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w1": (jax.random.normal(k1, (5, 7)) * 0.5).astype(dtype),
        "b1": jnp.zeros((7,), dtype),
        "w2": (jax.random.normal(k2, (7, 2)) * 0.5).astype(dtype),
    }


def _data(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 2)).astype(np.float32)


def test_equals_value_and_grad_on_the_whole_batch() -> None:
    params, (x, y) = _params(), _data()
    want_value, want_grads = jax.value_and_grad(_loss)(params, x, y)
    value, grads = jax.jit(jaxspec.microbatched_value_and_grad(_loss, 4))(params, x, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    for k in params:
        np.testing.assert_allclose(grads[k], want_grads[k], rtol=1e-5, atol=1e-7)


def test_aux_is_the_mean_over_parts_and_argnums_and_dtypes() -> None:
    params, (x, y) = _params(), _data()

    def loss_aux(scale, params, x, y):  # differentiate argnums (0, 1); x and y are split
        pred = _mlp(params, x) * scale
        return jnp.mean((pred - y) ** 2), {"mean_pred": jnp.mean(pred), "first": pred[0, 0]}

    (value, aux), (g_scale, g_params) = jaxspec.microbatched_value_and_grad(
        loss_aux, 2, argnums=(0, 1), has_aux=True
    )(jnp.float32(1.5), params, {"x": x}["x"], y)
    (want, _), (w_scale, w_params) = jax.value_and_grad(loss_aux, argnums=(0, 1), has_aux=True)(
        jnp.float32(1.5), params, x, y
    )
    pred = np.asarray(_mlp(params, x)) * 1.5
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(aux["mean_pred"], pred.mean(), rtol=1e-5)
    np.testing.assert_allclose(aux["first"], (pred[0, 0] + pred[8, 0]) / 2, rtol=1e-5)  # parts' firsts
    np.testing.assert_allclose(g_scale, w_scale, rtol=1e-5)
    np.testing.assert_allclose(g_params["w1"], w_params["w1"], rtol=1e-5, atol=1e-7)
    # bfloat16 parameters: summed in float32, each gradient cast back to its parameter's dtype
    bf = _params(jnp.bfloat16)
    value, grads = jaxspec.microbatched_value_and_grad(_loss, 4)(bf, x.astype(jnp.bfloat16), y)
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.bfloat16)}
    assert value.dtype == jnp.float32  # the loss's own dtype (y is float32)
    parts = [jax.grad(_loss)(bf, x[i : i + 4].astype(jnp.bfloat16), y[i : i + 4]) for i in range(0, 16, 4)]
    by_hand = sum(np.asarray(p["w2"], np.float32) for p in parts) / 4
    np.testing.assert_allclose(np.asarray(grads["w2"], np.float32), by_hand, rtol=2e-2, atol=2e-3)


def test_errors_name_both_numbers() -> None:
    params, (x, y) = _params(), _data(10)
    with pytest.raises(ValueError, match=r"leading axis of 10.*num_microbatches=4"):
        jaxspec.microbatched_value_and_grad(_loss, 4)(params, x, y)
    with pytest.raises(ValueError, match="scalar"):
        jaxspec.microbatched_value_and_grad(lambda p, s: jnp.sum(p["b1"]) * s, 2)(params, jnp.float32(2))
    with pytest.raises(ValueError, match=">= 1"):
        jaxspec.microbatched_value_and_grad(_loss, 0)
    with pytest.raises(TypeError, match="int"):
        jaxspec.microbatched_value_and_grad(_loss, 2.0)


# -- in a TPUEstimator ------------------------------------------------------------------------
class _Losses(jaxspec.SessionRunHook):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
        return jaxspec.SessionRunArgs("losses")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.losses += [float(v) for v in run_values.results]


def _init_fn() -> Any:
    return train_state.TrainState.create(
        apply_fn=_mlp, params=_params(), tx=jaxspec.CrossShardOptimizer(optax.sgd(0.1))
    )


def _model_fn(features, labels, mode, params, state):
    grad_fn = jaxspec.microbatched_value_and_grad(_loss, params["microbatches"])
    loss, grads = grad_fn(state.params, features["x"], labels)
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def _train(model_dir: str, microbatches: int) -> tuple[Any, _Losses]:
    x, y = _data(64 * 3)
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=2,
        log_step_count_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=2),
    )
    est = jaxspec.TPUEstimator(
        _model_fn,
        config=config,
        train_batch_size=64,  # 8 per replica on 8 devices: parts of 2 rows with 4 microbatches
        params={"microbatches": microbatches},
        init_fn=_init_fn,
    )

    def input_fn(params):
        b = params["batch_size"]
        for s in range(0, len(x), b):
            yield {"x": x[s : s + b]}, y[s : s + b]

    hook = _Losses()
    est.train(input_fn, hooks=[hook])
    return est, hook


def _all_reduces(est: Any) -> int:
    compiled = list(est._compile_cache.modes[ModeKeys.TRAIN].compiled.values())
    return sum(len(re.findall(r"= [^ ]+ all-reduce\(", c.as_text())) for c in compiled)


def test_tpu_estimator_one_and_four_microbatches_agree(tmp_path: Any) -> None:
    one, one_losses = _train(str(tmp_path / "one"), 1)
    four, four_losses = _train(str(tmp_path / "four"), 4)
    assert one.get_variable_value("global_step") == four.get_variable_value("global_step") == 3
    assert one._checkpoint_store().all_steps() == four._checkpoint_store().all_steps() == [0, 2, 3]
    for name in ("params/w1", "params/b1", "params/w2"):
        np.testing.assert_allclose(four.get_variable_value(name), one.get_variable_value(name), rtol=1e-5)
    # the loss reported is the mean over parts: the whole batch's loss, step by step
    np.testing.assert_allclose(four_losses.losses, one_losses.losses, rtol=1e-5)
    assert len(four_losses.losses) == 3
    # one gradient all-reduce per step, as without microbatches
    assert _all_reduces(four) == _all_reduces(one) >= 1


def _psum_depths(jaxpr: Any, depth: int = 0) -> list[int]:
    """The scan depth of every psum in a jaxpr (0: outside any scan)."""
    from jax.extend.core import jaxprs_in_params

    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name.startswith("psum"):  # psum, psum_invariant
            out.append(depth)
        inner = depth + (eqn.primitive.name == "scan")
        for sub in jaxprs_in_params(eqn.params):
            out += _psum_depths(sub, inner)
    return out


def test_the_replica_reduction_is_outside_the_microbatch_scan() -> None:
    """The accumulated gradient leaves the microbatch scan before CrossShardOptimizer
    reduces it: every psum of a train step runs once per step, none once per part."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("replica",))
    x, y = _data(64)
    tx = jaxspec.CrossShardOptimizer(optax.sgd(0.1))
    params = _params()

    def step(params, opt_state, x, y):
        loss, grads = jaxspec.microbatched_value_and_grad(_loss, 4)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    from jax.sharding import PartitionSpec as P

    specs = (P(), P(), P("replica"), P("replica"))  # check_vma off, as TPUEstimator's shard_map
    sharded = jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False)
    jaxpr = jax.make_jaxpr(sharded)(params, tx.init(params), x, y)
    depths = _psum_depths(jaxpr.jaxpr)
    assert depths and set(depths) == {0}
    want = jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(_loss)(params, x, y))
    got, _ = jax.jit(sharded)(params, tx.init(params), x, y)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7)


def test_negative_argnums_count_from_the_end_as_jax() -> None:
    """``argnums=-1`` differentiates the last argument (as jax.value_and_grad); the others
    are split, the differentiated one is not."""
    params, (x, y) = _params(), _data()

    def loss(x, y, params):
        return _loss(params, x, y)

    want_value, want_grad = jax.value_and_grad(loss, argnums=-1)(x, y, params)
    value, grad = jaxspec.microbatched_value_and_grad(loss, 4, argnums=-1)(x, y, params)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(jax.tree.leaves(grad), jax.tree.leaves(want_grad), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
