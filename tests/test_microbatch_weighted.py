"""Exact weighted accumulation (issue 46, item 4): ``microbatched_value_and_grad(fun, n,
weighted=True)`` with ``fun`` returning ``(sum of losses, weight)`` gives the whole
batch's ``Σ sum / Σ weight`` and its gradient (against ``jax.grad`` of the whole batch and
numpy by hand), on one device and over 8 replicas in ``shard_map`` with ``axis_name``; the
unweighted form stays bit for bit what it was."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxspec

T, D = 8, 3  # tokens per sequence, features per token


def _params() -> dict[str, Any]:
    k1, k2 = jax.random.split(jax.random.key(3))
    return {"w": jax.random.normal(k1, (D, 4)) * 0.7, "v": jax.random.normal(k2, (4,)) * 0.7}


def _tokens(valid: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sequences ``x [B, T, D]``, targets ``y [B, T]`` and a mask ``[B, T]`` with
    ``valid[i]`` leading valid tokens in row i (the rest padding)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(valid), T, D)).astype(np.float32)
    y = rng.normal(size=(len(valid), T)).astype(np.float32) * 3
    mask = (np.arange(T)[None, :] < np.asarray(valid)[:, None]).astype(np.float32)
    return x, y, mask


def _token_losses(params: Any, x: Any, y: Any) -> Any:
    return (jnp.tanh(x @ params["w"]) @ params["v"] - y) ** 2  # [B, T]


def _sum_and_count(params: Any, x: Any, y: Any, mask: Any) -> tuple[Any, Any]:
    return jnp.sum(_token_losses(params, x, y) * mask), jnp.sum(mask)


def _batch_loss(params: Any, x: Any, y: Any, mask: Any) -> Any:
    total, count = _sum_and_count(params, x, y, mask)
    return total / count


def _by_hand(params: Any, x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float:
    w, v = (np.asarray(params[k], np.float64) for k in ("w", "v"))
    losses = (np.tanh(x.astype(np.float64) @ w) @ v - y) ** 2
    return float((losses * mask).sum() / mask.sum())


def _close(got: Any, want: Any, rtol: float = 1e-5) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-6)


def test_four_parts_of_8_2_5_1_tokens_give_the_batch_loss_and_gradient() -> None:
    params, (x, y, mask) = _params(), _tokens([8, 2, 5, 1])
    value, grads = jax.jit(jaxspec.microbatched_value_and_grad(_sum_and_count, 4, weighted=True))(
        params, x, y, mask
    )
    want_value, want_grads = jax.value_and_grad(_batch_loss)(params, x, y, mask)
    np.testing.assert_allclose(value, _by_hand(params, x, y, mask), rtol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    _close(grads, want_grads)
    # the unweighted mean of the parts' means is another number: why weighted exists
    means, _ = jaxspec.microbatched_value_and_grad(_batch_loss, 4)(params, x, y, mask)
    parts = [_by_hand(params, x[i : i + 1], y[i : i + 1], mask[i : i + 1]) for i in range(4)]
    np.testing.assert_allclose(means, np.mean(parts), rtol=1e-5)
    assert abs(float(means) - float(value)) > 0.01 * abs(float(value))


def test_weighted_with_aux_one_part_bfloat16_and_zero_weight() -> None:
    params, (x, y, mask) = _params(), _tokens([3, 0, 7, 4], seed=1)

    def with_aux(params, x, y, mask):
        total, count = _sum_and_count(params, x, y, mask)
        return (total, count), {"count": count}

    (value, aux), grads = jaxspec.microbatched_value_and_grad(with_aux, 2, weighted=True, has_aux=True)(
        params, x, y, mask
    )
    _close((value, grads), jax.value_and_grad(_batch_loss)(params, x, y, mask))
    np.testing.assert_allclose(aux["count"], mask.sum() / 2)  # aux: the mean over the parts
    one = jaxspec.microbatched_value_and_grad(_sum_and_count, 1, weighted=True)(params, x, y, mask)
    _close(one, jax.value_and_grad(_batch_loss)(params, x, y, mask))
    bf = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
    value, grads = jaxspec.microbatched_value_and_grad(_sum_and_count, 4, weighted=True)(bf, x, y, mask)
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.bfloat16)}
    want = jax.grad(_batch_loss)(jax.tree.map(lambda a: a.astype(jnp.float32), bf), x, y, mask)
    _close(jax.tree.map(lambda g: g.astype(jnp.float32), grads), want, rtol=3e-2)
    empty = np.zeros_like(mask)  # no valid token anywhere: 0, not NaN (tf.math.divide_no_nan)
    value, grads = jaxspec.microbatched_value_and_grad(_sum_and_count, 2, weighted=True)(params, x, y, empty)
    assert float(value) == 0.0 and all(not np.asarray(g).any() for g in jax.tree.leaves(grads))
    with pytest.raises(TypeError, match=r"\(sum of losses, weight\)"):
        jaxspec.microbatched_value_and_grad(_batch_loss, 2, weighted=True)(params, x, y, mask)


@pytest.mark.parametrize("check_vma", [True, False])  # False: as TPUEstimator's shard_map
def test_eight_replicas_with_axis_name_give_the_global_batch(check_vma: bool) -> None:
    """32 sequences over 8 replicas, 4 parts each (8/2/5/1 valid tokens and others):
    every replica returns the whole batch's Σ/Σ and its gradient."""
    valid = [8, 2, 5, 1, 0, 7, 3, 6] * 4
    params, (x, y, mask) = _params(), _tokens(valid, seed=2)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("replica",))
    grad_fn = jaxspec.microbatched_value_and_grad(_sum_and_count, 4, weighted=True, axis_name="replica")

    def step(params, x, y, mask):
        value, grads = grad_fn(params, x, y, mask)
        return value[None], jax.tree.map(lambda g: g[None], grads)  # each replica's own answer

    specs = (P(), P("replica"), P("replica"), P("replica"))
    sharded = jax.jit(
        jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=P("replica"), check_vma=check_vma)
    )
    values, grads = sharded(params, x, y, mask)
    want_value, want_grads = jax.value_and_grad(_batch_loss)(params, x, y, mask)
    np.testing.assert_allclose(values, np.full(8, _by_hand(params, x, y, mask)), rtol=1e-5)
    np.testing.assert_allclose(values, np.full(8, want_value), rtol=1e-5)
    _close(grads, jax.tree.map(lambda g: np.broadcast_to(g, (8, *g.shape)), want_grads))
    # unweighted with axis_name: the global mean of the parts' means, on every replica
    mean_fn = jaxspec.microbatched_value_and_grad(_batch_loss, 2, axis_name="replica")

    def step_mean(*args):
        value, grads = mean_fn(*args)
        return value[None], jax.tree.map(lambda g: g[None], grads)

    step_mean = jax.shard_map(
        step_mean, mesh=mesh, in_specs=specs, out_specs=P("replica"), check_vma=check_vma
    )
    value, grads = jax.jit(step_mean)(params, x, y, mask)
    parts = [_by_hand(params, x[i : i + 2], y[i : i + 2], mask[i : i + 2]) for i in range(0, 32, 2)]
    np.testing.assert_allclose(value, np.full(8, np.mean(parts)), rtol=1e-5)
    part_grads = [
        jax.grad(_batch_loss)(params, *(a[i : i + 2] for a in (x, y, mask))) for i in range(0, 32, 2)
    ]
    want_mean = jax.tree.map(lambda *g: np.mean(np.stack(g), 0), *part_grads)
    _close(grads, jax.tree.map(lambda g: np.broadcast_to(g, (8, *g.shape)), want_mean))


def _mean_of_parts_reference(fun: Any, n: int, params: Any, *batch: Any) -> Any:
    """The unweighted algorithm as it stood before ``weighted`` (issue 46): a lax.scan of
    jax.value_and_grad over the parts, summed in float32 from zeros, divided by n and
    cast back."""
    parts = [jnp.reshape(b, (n, b.shape[0] // n, *b.shape[1:])) for b in batch]
    like = jax.eval_shape(jax.value_and_grad(fun), params, *(p[0] for p in parts))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), like)

    def body(acc, part):
        out = jax.value_and_grad(fun)(params, *part)
        return jax.tree.map(lambda a, o: a + jnp.asarray(o).astype(jnp.float32), acc, out), None

    total, _ = jax.lax.scan(body, zeros, parts, length=n)
    return jax.tree.map(lambda a, s: (a / n).astype(s.dtype), total, like)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_unweighted_form_is_bit_identical(dtype: Any) -> None:
    params, (x, y, mask) = jax.tree.map(lambda a: a.astype(dtype), _params()), _tokens([8, 2, 5, 1] * 2)
    for n in (2, 4, 8):
        got = jax.jit(jaxspec.microbatched_value_and_grad(_batch_loss, n))(params, x, y, mask)
        want = jax.jit(lambda *a, n=n: _mean_of_parts_reference(_batch_loss, n, *a))(params, x, y, mask)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert g.dtype == w.dtype and np.array_equal(np.asarray(g), np.asarray(w)), n
