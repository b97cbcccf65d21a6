"""CrossShardOptimizer (``tf.compat.v1.tpu.CrossShardOptimizer``): an optax
transformation that reduces gradients over replicas."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxspec.mesh_axes import CORE_AXIS, traced_replica_axis
from jaxspec.spec.fn_types import Array, PyTree

MEAN = "mean"
SUM = "sum"
_REDUCTIONS = {MEAN: MEAN, SUM: SUM, "weighted_mean": MEAN, "sum_over_batch_size": MEAN}


def _axis_bound(axis_name: str) -> bool:
    """Whether ``axis_name`` is bound with more than one member: a reduction over one
    replica is the identity (and XLA refuses one inside a partly manual shard_map, as
    with ``num_cores_per_replica`` = all devices)."""
    try:
        return jax.lax.axis_size(axis_name) > 1
    except NameError:
        return False


def _cores() -> int:
    """Size of the ``'core'`` axis of the mesh being traced (1 without one)."""
    return dict(jax.sharding.get_abstract_mesh().shape).get(CORE_AXIS, 1)


def _reduce_by_dtype(tree: PyTree, reduce: Callable[[Array, str], Array], axis: str) -> PyTree:
    """Reduce every leaf over the replica axis with one collective per dtype: the leaves
    of a dtype are flattened into one vector (one all-reduce instead of one per leaf,
    which matters where each collective has a fixed cost, as CPU gloo), never upcast."""
    leaves, treedef = jax.tree.flatten(tree)
    out: list[Any] = [None] * len(leaves)
    by_dtype: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        by_dtype.setdefault(jnp.result_type(leaf), []).append(i)
    for indices in by_dtype.values():
        flat = jnp.concatenate([jnp.ravel(leaves[i]) for i in indices])
        reduced = reduce(flat, axis)
        offset = 0
        for i in indices:
            size = leaves[i].size
            out[i] = reduced[offset : offset + size].reshape(leaves[i].shape)
            offset += size
    return jax.tree.unflatten(treedef, out)


def CrossShardOptimizer(
    opt: optax.GradientTransformation,
    reduction: str = MEAN,
    name: str = "CrossShardOptimizer",
    group_assignment: Sequence[Sequence[int]] | None = None,
) -> optax.GradientTransformation:
    """Wrap ``opt`` so gradients are averaged (or summed) over the replica axis first.

    The JAX form of ``tf.compat.v1.tpu.CrossShardOptimizer``: inside TPUEstimator's
    shard_map the gradients each replica computed from its own batch are reduced with
    ``lax.pmean`` (``reduction='mean'``, TF's default) or ``lax.psum`` (``'sum'``) over
    the replica axis (``'replica'``, or TPUConfig's ``replica_axis_name``), then ``opt`` runs on the reduced gradients, so every replica
    applies the same update. With ``num_cores_per_replica`` > 1 the reduction is over
    ``'replica'`` only (the cores of a replica hold one gradient, split by XLA), one
    collective per leaf so no sharded leaf is gathered. Off the mesh (``Estimator``, ``use_tpu=False``) there is no
    replica axis and it is ``opt`` unchanged, as TF's is with a single shard.

    Args:
      opt: an optax GradientTransformation.
      reduction: ``'mean'`` or ``'sum'`` (TF's ``tf.compat.v1.losses.Reduction`` names
        ``'weighted_mean'``/``'sum_over_batch_size'`` mean the same as ``'mean'``).
      name: accepted for compatibility.
      group_assignment: only None (all replicas in one group) is supported.

    Returns:
      An optax GradientTransformation with the same state as ``opt``.

    Raises:
      ValueError: unknown reduction, or a group_assignment.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"CrossShardOptimizer: reduction must be one of {sorted(_REDUCTIONS)}, got {reduction!r}."
        )
    if group_assignment is not None:
        raise ValueError(
            "CrossShardOptimizer: group_assignment is not supported; all replicas form one group."
        )
    opt = optax.with_extra_args_support(opt)
    reduce = jax.lax.pmean if _REDUCTIONS[reduction] == MEAN else jax.lax.psum

    def update_fn(
        updates: optax.Updates, state: optax.OptState, params: optax.Params | None = None, **extra: Any
    ) -> tuple[optax.Updates, optax.OptState]:
        axis = traced_replica_axis()  # TPUConfig's replica_axis_name, 'replica' by default
        if _axis_bound(axis):
            if _cores() > 1:  # leaves split over 'core': one collective each, never concatenated
                updates = jax.tree.map(lambda g: reduce(g, axis), updates)
            else:
                updates = _reduce_by_dtype(updates, reduce, axis)
        return opt.update(updates, state, params, **extra)

    return optax.GradientTransformationExtraArgs(opt.init, update_fn)
