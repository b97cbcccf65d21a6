"""Gradient accumulation: ``microbatched_value_and_grad``, ``jax.value_and_grad`` over
equal parts of a batch run one after another in a ``lax.scan``.

tf.estimator has no accumulation of its own (TF users wrote it into their train_op); the
signature and the result here are ``jax.value_and_grad``'s, so a model_fn changes one
call. The optimizer then sees one gradient per step: ``global_step`` counts optimizer
updates, not parts, and ``CrossShardOptimizer`` reduces that one gradient over replicas
once per step (optax's ``MultiSteps`` instead counts every part as a step).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec._checks import type_name
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

_F32 = jnp.float32


def _argnums_tuple(argnums: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(argnums, int | np.integer):
        return (int(argnums),)
    return tuple(operator.index(i) for i in argnums)


def _split_leaf(leaf: ArrayLike, n: int, where: str) -> Array:
    """``[B, ...]`` -> ``[n, B // n, ...]`` (the parts in row order)."""
    shape = np.shape(leaf)
    if not shape:
        raise ValueError(
            f"microbatched_value_and_grad: {where} is a scalar; an argument that is split over "
            f"num_microbatches={n} needs a leading (batch) axis. Pass it by keyword or in a closure."
        )
    if shape[0] % n:
        raise ValueError(
            f"microbatched_value_and_grad: {where} has a leading axis of {shape[0]}, which "
            f"num_microbatches={n} does not divide."
        )
    return jnp.reshape(leaf, (n, shape[0] // n) + tuple(shape[1:]))


def _split(arg: PyTree, n: int, position: int) -> PyTree:
    def split(path: jax.tree_util.KeyPath, leaf: Any) -> Any:
        if not hasattr(leaf, "shape"):
            return leaf  # a Python number or other static leaf: the same in every part
        return _split_leaf(leaf, n, f"positional argument {position}{jax.tree_util.keystr(path)}")

    return jax.tree_util.tree_map_with_path(split, arg)


def _varying_axes(like: jax.ShapeDtypeStruct) -> tuple[str, ...]:
    """The manual mesh axes ``like`` varies over (inside a ``shard_map`` that checks
    them): the accumulator must vary over the same ones to be a scan carry."""
    axes = getattr(like, "vma", None)
    if axes is None:
        axes = getattr(getattr(like, "manual_axis_type", None), "varying", None)
    return tuple(sorted(axes or ()))


def _varying(tree: PyTree, axis_name: str) -> PyTree:
    """``tree`` marked as varying over ``axis_name`` (``lax.pcast``) where it is not: the
    gradient of a replicated (invariant) argument would otherwise be summed over the
    axis by JAX's autodiff in every part; this way each replica's gradient stays its own
    until the one reduction after the parts."""

    def vary(leaf: Any) -> Any:
        if not hasattr(leaf, "shape") or axis_name in _varying_axes(jax.typeof(leaf)):
            return leaf
        return jax.lax.pcast(leaf, (axis_name,), to="varying")

    return jax.tree.map(vary, tree)


def _zeros_f32(tree: PyTree) -> PyTree:
    def zeros(like: jax.ShapeDtypeStruct) -> Array:
        z = jnp.zeros(like.shape, _F32)
        axes = _varying_axes(like)
        return jax.lax.pcast(z, axes, to="varying") if axes else z

    return jax.tree.map(zeros, tree)


def _add_f32(acc: PyTree, new: PyTree) -> PyTree:
    return jax.tree.map(lambda a, x: a + jnp.asarray(x).astype(_F32), acc, new)


def _mean_as(acc: PyTree, like: PyTree, n: int) -> PyTree:
    return jax.tree.map(lambda a, s: (a / n).astype(s.dtype), acc, like)


def _check_count(num_microbatches: object) -> int:
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int | np.integer):
        raise TypeError(
            f"microbatched_value_and_grad: num_microbatches must be an int, got {type_name(num_microbatches)}."
        )
    n = int(num_microbatches)
    if n < 1:
        raise ValueError(f"microbatched_value_and_grad: num_microbatches must be >= 1, got {n}.")
    return n


def _sum_and_weight(
    fun: Callable[..., Any], has_aux: bool
) -> Callable[..., tuple[Array, tuple[Array, PyTree]]]:
    """``fun`` (returning ``(sum, weight)``, or ``((sum, weight), aux)``) as a function
    for ``jax.value_and_grad(..., has_aux=True)``: value ``sum``, aux ``(weight, aux)``
    (the weight is not differentiated: counts, masks' sums)."""

    def summed(*args: Any, **kwargs: Any) -> tuple[Array, tuple[Array, PyTree]]:
        out = fun(*args, **kwargs)
        pair, aux = out if has_aux else (out, None)
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                "microbatched_value_and_grad(weighted=True): fun must return (sum of losses, weight)"
                + (" and its aux: ((sum, weight), aux)" if has_aux else "")
                + f", got {type_name(pair)}."
            )
        total, weight = pair
        return total, (jax.lax.stop_gradient(weight), aux)

    return summed


def _divide(total: PyTree, weight: Array, like: PyTree) -> PyTree:
    """``total / weight`` leaf by leaf in float32, cast to ``like``'s dtypes; 0 where the
    weight is 0 (``tf.math.divide_no_nan``, as tf.losses' SUM_BY_NONZERO_WEIGHTS)."""

    def one(t: Array, s: jax.ShapeDtypeStruct) -> Array:
        safe = jnp.where(weight == 0, jnp.ones_like(weight), weight)
        return jnp.where(weight == 0, jnp.zeros_like(t), t / safe).astype(s.dtype)

    return jax.tree.map(one, total, like)


def microbatched_value_and_grad(
    fun: Callable[..., Any],
    num_microbatches: int,
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    weighted: bool = False,
    axis_name: str | None = None,
) -> Callable[..., tuple[PyTree, PyTree]]:
    """``jax.value_and_grad(fun, argnums, has_aux)``, computed over ``num_microbatches``
    equal parts of the batch, one part at a time.

    The returned function takes ``fun``'s arguments. Each positional argument not in
    ``argnums`` (features, labels, a mask, ...) is a pytree whose array leaves are
    split along axis 0 into ``num_microbatches`` equal parts of consecutive rows
    (``[B, ...]`` -> parts of ``[B // num_microbatches, ...]``); leaves that are not
    arrays, and keyword arguments, go whole to every part. A ``lax.scan`` runs
    ``jax.value_and_grad`` on one part after another, so only one part's activations
    are live at a time (the point: memory, not speed). The result is
    ``jax.value_and_grad``'s, ``(value, grads)`` or ``((value, aux), grads)``.

    Unweighted (the default): ``value`` is the mean of the parts' values and ``grads``
    the mean of their gradients, both summed in float32 and cast back to ``fun``'s value
    dtype and each parameter's dtype. For a ``fun`` whose value is a mean over rows that
    all count alike, that is the value and gradient of the whole batch (up to float
    rounding). For a loss normalised by a count that differs between parts (valid
    tokens of padded sequences, weighted rows), a mean of means is not the batch's
    loss: use ``weighted=True``.

    ``weighted=True``: ``fun`` returns ``(sum of losses, weight)`` (with ``has_aux``,
    ``((sum, weight), aux)``), scalars: e.g. the summed per-token losses and the number
    of valid tokens. ``value`` is ``Σ sum / Σ weight`` over the parts and ``grads`` that
    value's gradient, ``Σ ∇sum / Σ weight`` (the weight is not differentiated), summed
    in float32; a total weight of 0 gives 0 for both (``tf.math.divide_no_nan``, as
    ``tf.compat.v1.losses``' ``SUM_BY_NONZERO_WEIGHTS``).

    With has_aux, each aux leaf is the mean over the parts (summed in float32, cast
    back to its dtype). That is right for per-batch means (an accuracy, a loss term) and
    wrong for anything else: BatchNorm's batch statistics come out as the mean of the
    parts' statistics (each part normalises with its own, smaller, batch, and a running
    average updated from that mean differs from one updated part by part), and
    per-example aux (predictions ``[B, ...]``) is averaged over parts, not concatenated.

    Inside a TPUEstimator model_fn the arguments are the replica's own rows, so the
    per-replica batch (``params['batch_size']``) is split; a ``CrossShardOptimizer``
    still reduces the one accumulated gradient over replicas once per step, and
    ``global_step`` counts optimizer updates.

    ``axis_name`` (a JAX addition; e.g. ``'replica'`` inside a TPUEstimator model_fn):
    the result is the global batch's, the same on every replica. Weighted, the sums,
    weights and gradients are summed over that axis before the division, so
    ``value = Σ sum / Σ weight`` over every part of every replica; unweighted, value
    and gradients are averaged over it (``lax.pmean``: the global batch's mean, since
    every replica has as many rows); aux leaves are averaged over it in both forms. The
    gradients are then already reduced: use a plain optax optimizer, or a
    ``CrossShardOptimizer`` with its default ``reduction='mean'`` (which leaves equal
    values equal), not ``'sum'``.

    Args:
      fun: as for ``jax.value_and_grad``: a scalar-valued function (with ``has_aux``,
        returning ``(value, aux)``); weighted, returning ``(sum, weight)`` (see above).
      num_microbatches: parts per batch, an int >= 1 (1, unweighted and without
        axis_name: ``jax.value_and_grad`` itself).
      argnums: int or sequence of ints: the positional arguments to differentiate
        (not split).
      has_aux: whether ``fun`` returns ``(value, aux)``.
      weighted: whether ``fun`` returns ``(sum, weight)`` and the value is their ratio.
      axis_name: a mapped axis (of ``shard_map``/``pmap``) to reduce over, or None.

    Returns:
      A function with ``fun``'s arguments returning what ``jax.value_and_grad`` returns.

    Raises:
      TypeError: num_microbatches is not an int; argnums not ints (as
        ``jax.value_and_grad``); weighted, when called, ``fun`` returns no ``(sum,
        weight)`` pair.
      ValueError: num_microbatches < 1; or, when the returned function is called, a
        split leaf whose leading axis ``num_microbatches`` does not divide (both numbers
        named) or a scalar split leaf.
    """
    n = _check_count(num_microbatches)
    if weighted:
        value_and_grad = jax.value_and_grad(_sum_and_weight(fun, has_aux), argnums=argnums, has_aux=True)
    else:
        value_and_grad = jax.value_and_grad(fun, argnums=argnums, has_aux=has_aux)
    if n == 1 and not weighted and axis_name is None:
        return value_and_grad
    diff = _argnums_tuple(argnums)

    @functools.wraps(fun)
    def accumulated(*args: Any, **kwargs: Any) -> tuple[PyTree, PyTree]:
        if axis_name is not None:  # gradients per replica, reduced once below
            wrt = {i % len(args) if -len(args) <= i < 0 else i for i in diff}
            args = tuple(_varying(a, axis_name) if i in wrt else a for i, a in enumerate(args))
        total, like = _accumulate(value_and_grad, n, diff, args, kwargs)
        if weighted:
            return _weighted_result(total, like, n, has_aux, axis_name)
        if axis_name is not None:
            total = jax.lax.pmean(total, axis_name)
        return _mean_as(total, like, n)

    return accumulated


def _accumulate(
    value_and_grad: Callable[..., tuple[PyTree, PyTree]],
    n: int,
    diff: tuple[int, ...],
    args: tuple[PyTree, ...],
    kwargs: dict[str, PyTree],
) -> tuple[PyTree, PyTree]:
    """``value_and_grad``'s results over the ``n`` parts of ``args`` (those not in
    ``diff``), summed in float32, and the shapes/dtypes of one part's results."""
    if n == 1:
        out = value_and_grad(*args, **kwargs)
        return _add_f32(_zeros_f32(jax.eval_shape(lambda: out)), out), out
    wrt = {i % len(args) if -len(args) <= i < 0 else i for i in diff}  # negative as jax counts them
    split_at = [i for i in range(len(args)) if i not in wrt]
    leaves, treedef = jax.tree.flatten([_split(args[i], n, i) for i in split_at])
    arrays = [i for i, leaf in enumerate(leaves) if hasattr(leaf, "shape")]

    def one_part(part: list[Array]) -> tuple[PyTree, PyTree]:
        full_leaves = list(leaves)
        for i, a in zip(arrays, part, strict=True):
            full_leaves[i] = a
        full = list(args)
        for i, a in zip(split_at, jax.tree.unflatten(treedef, full_leaves), strict=True):
            full[i] = a
        return value_and_grad(*full, **kwargs)

    scanned = [leaves[i] for i in arrays]  # each [n, B // n, ...]
    like = jax.eval_shape(one_part, [x[0] for x in scanned])  # (value[, aux]), grads

    def body(acc: PyTree, part: list[Array]) -> tuple[PyTree, None]:
        return _add_f32(acc, one_part(part)), None

    total, _ = jax.lax.scan(body, _zeros_f32(like), scanned, length=n)
    return total, like


def _weighted_result(
    total: PyTree, like: PyTree, n: int, has_aux: bool, axis_name: str | None
) -> tuple[PyTree, PyTree]:
    """``((sum, (weight, aux)), grads)`` summed over the parts (and ``axis_name``) ->
    ``jax.value_and_grad``'s result for ``sum / weight``."""
    (summed, (weight, aux)), grads = total
    (sum_like, (_, aux_like)), grads_like = like
    if axis_name is not None:
        summed, weight, grads = jax.lax.psum((summed, weight, grads), axis_name)
        aux = jax.lax.pmean(aux, axis_name)
    value = _divide(summed, weight, sum_like)
    grads = _divide(grads, weight, grads_like)
    if has_aux:
        return (value, _mean_as(aux, aux_like, n)), grads
    return value, grads


__all__ = ["microbatched_value_and_grad"]
