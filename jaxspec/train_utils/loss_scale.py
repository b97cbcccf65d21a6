"""Loss scaling for float16 training: the NPU adapter's loss scale managers and a
``LossScaleOptimizer`` (an optax transformation) that uses them.

The managers keep the names, arguments and update rule of Ascend's
``npu_loss_scale_manager`` (``tf_bridge.npu``'s, on the TensorFlow side), so a history
of finite and non-finite steps gives the same scales on both sides. TF's managers hold
their counts in variables; here the state is an explicit ``LossScaleState`` kept in the
optimizer state (and so in every checkpoint).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec._checks import type_name
from jaxspec.mesh_axes import traced_replica_axis
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

_FLOAT32_MAX = 3.4e38  # the adapter's bound on a growing scale


class LossScaleState(NamedTuple):
    """A loss scale manager's state (a pytree of scalars).

    Attributes:
      loss_scale: float32 scalar, the scale the next step multiplies its loss by.
      good_steps: int32 scalar, finite steps counted towards the next growth.
      bad_steps: int32 scalar, non-finite steps counted towards the next shrink.
    """

    loss_scale: Array
    good_steps: Array
    bad_steps: Array


def _state(loss_scale: float) -> LossScaleState:
    return LossScaleState(jnp.float32(loss_scale), jnp.int32(0), jnp.int32(0))


class FixedLossScaleManager:
    """A loss scale that never changes (the adapter's ``FixedLossScaleManager``).

    Args:
      loss_scale: a Python number >= 1.

    Raises:
      ValueError: loss_scale < 1.
    """

    def __init__(self, loss_scale: float) -> None:
        if not (math.isfinite(loss_scale) and loss_scale >= 1):  # NaN fails both
            raise ValueError(f"FixedLossScaleManager: loss_scale must be finite and >= 1, got {loss_scale}.")
        self._loss_scale = float(loss_scale)

    def init(self) -> LossScaleState:
        """The first state: the scale, counts 0."""
        return _state(self._loss_scale)

    def get_loss_scale(self, state: LossScaleState) -> Array:
        """The current scale (float32 scalar) of ``state``."""
        return state.loss_scale

    def update_loss_scale(self, state: LossScaleState, finite_grads: ArrayLike) -> LossScaleState:
        """``state`` unchanged, whatever ``finite_grads`` (a bool scalar) says."""
        return state


def _check_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"ExponentialUpdateLossScaleManager: {name} must be an int, got {type_name(value)}.")
    if value < 1:
        raise ValueError(f"ExponentialUpdateLossScaleManager: {name} must be >= 1, got {value}.")
    return int(value)


class ExponentialUpdateLossScaleManager:
    """A scale that grows after runs of finite steps and shrinks after overflows (the
    adapter's ``ExponentialUpdateLossScaleManager``, whose rule follows TF 1's contrib
    mixed-precision manager).

    Per step, with finite gradients: if this is the ``incr_every_n_steps``-th finite
    step counted, the scale is multiplied by ``incr_ratio`` (kept as it is when the
    product would pass float32's range) and both counts reset; otherwise the good count
    grows by one. With non-finite gradients: if this is the
    ``decr_every_n_nan_or_inf``-th non-finite step counted, the scale becomes
    ``max(1, scale * decr_ratio)`` and both counts reset; otherwise the bad count grows
    and the good count resets. Non-finite steps need not be consecutive. The arithmetic
    is float32's, as in TF.

    Args:
      init_loss_scale: the first scale (a Python number).
      incr_every_n_steps: finite steps in a row before the scale grows (int >= 1).
      decr_every_n_nan_or_inf: non-finite steps before it shrinks (int >= 1); 2.
      incr_ratio: growth factor; 2.0.
      decr_ratio: shrink factor; 0.8.

    Raises:
      TypeError: a count is not an int.
      ValueError: a count < 1, or a ratio <= 0 (the adapter does not check; a zero or
        negative ratio has no meaning).
    """

    def __init__(
        self,
        init_loss_scale: float,
        incr_every_n_steps: int,
        decr_every_n_nan_or_inf: int = 2,
        incr_ratio: float = 2.0,
        decr_ratio: float = 0.8,
    ) -> None:
        if not (math.isfinite(init_loss_scale) and init_loss_scale > 0):  # NaN would skip every step
            raise ValueError(
                f"ExponentialUpdateLossScaleManager: init_loss_scale must be finite and > 0, got {init_loss_scale}."
            )
        self._init_loss_scale = float(init_loss_scale)
        self._incr_every_n_steps = _check_count(incr_every_n_steps, "incr_every_n_steps")
        self._decr_every_n_nan_or_inf = _check_count(decr_every_n_nan_or_inf, "decr_every_n_nan_or_inf")
        for name, ratio in (("incr_ratio", incr_ratio), ("decr_ratio", decr_ratio)):
            if not (math.isfinite(ratio) and ratio > 0):
                raise ValueError(f"ExponentialUpdateLossScaleManager: {name} must be > 0, got {ratio}.")
        self._incr_ratio = float(incr_ratio)
        self._decr_ratio = float(decr_ratio)

    def init(self) -> LossScaleState:
        """The first state: ``init_loss_scale``, counts 0."""
        return _state(self._init_loss_scale)

    def get_loss_scale(self, state: LossScaleState) -> Array:
        """The current scale (float32 scalar) of ``state``."""
        return state.loss_scale

    def update_loss_scale(self, state: LossScaleState, finite_grads: ArrayLike) -> LossScaleState:
        """The state after one step whose gradients were all finite (``finite_grads``, a
        bool scalar, True) or not; traceable (no Python branch on the flag)."""
        scale, good, bad = state
        zero = jnp.int32(0)
        grow = good + 1 >= self._incr_every_n_steps
        limit = jnp.float32(_FLOAT32_MAX / self._incr_ratio)
        grown = jnp.where(scale < limit, scale * jnp.float32(self._incr_ratio), scale)
        on_finite = LossScaleState(
            jnp.where(grow, grown, scale), jnp.where(grow, zero, good + 1), jnp.where(grow, zero, bad)
        )
        shrink = bad + 1 >= self._decr_every_n_nan_or_inf
        shrunk = jnp.maximum(jnp.float32(1.0), scale * jnp.float32(self._decr_ratio))
        on_overflow = LossScaleState(jnp.where(shrink, shrunk, scale), zero, jnp.where(shrink, zero, bad + 1))
        return jax.tree.map(lambda a, b: jnp.where(finite_grads, a, b), on_finite, on_overflow)


LossScaleManager = FixedLossScaleManager | ExponentialUpdateLossScaleManager


class LossScaleOptimizerState(NamedTuple):
    """``LossScaleOptimizer``'s state: the manager's ``loss_scale`` (a LossScaleState)
    and the inner transformation's state."""

    loss_scale: LossScaleState
    inner_state: PyTree


def find_loss_scale(tree: PyTree) -> Array | None:
    """The loss scale (float32 scalar) of the first LossScaleState in ``tree`` (an
    optimizer state, or a whole train state), or None when it holds none."""
    for leaf in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, LossScaleState)):
        if isinstance(leaf, LossScaleState):
            return leaf.loss_scale
    return None


def current_loss_scale(opt_state: PyTree) -> Array:
    """The loss scale in ``opt_state`` (float32 scalar): that of the first
    ``LossScaleOptimizer`` state found in it, however deep (an ``optax.chain``, a
    ``CrossShardOptimizer``, a flax TrainState are all searched).

    Raises:
      ValueError: ``opt_state`` holds no LossScaleOptimizer state.
    """
    scale = find_loss_scale(opt_state)
    if scale is None:
        raise ValueError(
            f"current_loss_scale: opt_state ({type_name(opt_state)}) holds no LossScaleOptimizer state."
        )
    return scale


def _all_finite(tree: PyTree) -> Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def _finite_on_every_replica(finite: Array) -> Array:
    """``finite`` and-reduced over the replica axis when it is bound (inside
    TPUEstimator's shard_map): every replica then takes the same branch."""
    axis = traced_replica_axis()
    try:
        if jax.lax.axis_size(axis) <= 1:
            return finite
    except NameError:  # off the mesh: no replica axis
        return finite
    return jax.lax.pmin(finite.astype(jnp.int32), axis) > 0


class LossScaleTransformation(optax.GradientTransformationExtraArgs):
    """The ``optax.GradientTransformationExtraArgs`` ``LossScaleOptimizer`` returns:
    ``init``, ``update``, and ``scale_loss(loss, opt_state)``."""

    __slots__ = ()

    def scale_loss(self, loss: ArrayLike, opt_state: PyTree) -> Array:
        """``loss`` times the current scale of ``opt_state`` (``current_loss_scale``),
        computed in float32 (or the loss's dtype where that is wider: a float16 loss
        would overflow at a scale of 2**16). Differentiate this, and pass the
        gradients to ``update``.

        Raises:
          ValueError: as ``current_loss_scale``.
        """
        dtype = jnp.promote_types(jnp.result_type(loss), jnp.float32)
        return jnp.asarray(loss, dtype) * current_loss_scale(opt_state).astype(dtype)


def LossScaleOptimizer(  # noqa: N802 - the adapter's class name
    inner: optax.GradientTransformation, loss_scale_manager: LossScaleManager
) -> LossScaleTransformation:
    """Wrap ``inner`` with loss scaling (the JAX form of the adapter's
    ``NPULossScaleOptimizer`` and TF's ``LossScaleOptimizer``).

    model_fn differentiates ``tx.scale_loss(loss, opt_state)`` (the loss times the
    current scale) and passes those gradients to ``update``, which divides them by the
    scale (in float32, cast back to each gradient's dtype) and checks that every element
    is finite; inside TPUEstimator's shard_map the flag is and-reduced over the replica
    axis (one small all-reduce), so all replicas agree. On a finite step ``inner``
    updates and the manager's rule runs; on a non-finite step the updates are zeros,
    ``inner``'s state is kept as it was and the manager's rule runs (the scale falls
    once ``decr_every_n_nan_or_inf`` such steps are counted). The runner still counts
    the step: ``global_step`` grows on a skipped step, where the adapter's optimizer
    leaves TF's global step as it was (jaxspec's step is the runner's, not the
    optimizer's).

    Args:
      inner: the optax transformation to apply to the unscaled gradients (a
        ``CrossShardOptimizer`` included).
      loss_scale_manager: a FixedLossScaleManager or ExponentialUpdateLossScaleManager.

    Returns:
      A LossScaleTransformation (an ``optax.GradientTransformationExtraArgs``) whose
      state is a ``LossScaleOptimizerState``; ``jaxspec.current_loss_scale`` reads it.

    Raises:
      TypeError: inner is not an optax GradientTransformation, or the manager is not
        one of the two managers.
    """
    if not isinstance(inner, optax.GradientTransformation):
        raise TypeError(
            f"LossScaleOptimizer: inner must be an optax GradientTransformation, got {type_name(inner)}."
        )
    if not isinstance(loss_scale_manager, FixedLossScaleManager | ExponentialUpdateLossScaleManager):
        raise TypeError(
            "LossScaleOptimizer: loss_scale_manager must be a FixedLossScaleManager or an "
            f"ExponentialUpdateLossScaleManager, got {type_name(loss_scale_manager)}."
        )
    inner = optax.with_extra_args_support(inner)
    manager = loss_scale_manager

    def init_fn(params: optax.Params) -> LossScaleOptimizerState:
        return LossScaleOptimizerState(manager.init(), inner.init(params))

    def update_fn(
        updates: optax.Updates,
        state: LossScaleOptimizerState,
        params: optax.Params | None = None,
        **extra: Any,
    ) -> tuple[optax.Updates, LossScaleOptimizerState]:
        scale = state.loss_scale.loss_scale
        grads = jax.tree.map(lambda g: (g.astype(jnp.float32) / scale).astype(g.dtype), updates)
        finite = _finite_on_every_replica(_all_finite(grads))
        new_updates, new_inner = inner.update(grads, state.inner_state, params, **extra)
        kept = _select(finite, new_inner, state.inner_state)
        zeroed = jax.tree.map(lambda u: jnp.where(finite, u, jnp.zeros_like(u)), new_updates)
        return zeroed, LossScaleOptimizerState(manager.update_loss_scale(state.loss_scale, finite), kept)

    return LossScaleTransformation(init_fn, update_fn)


def _select(flag: Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    where: Callable[[Array, Array], Array] = lambda a, b: jnp.where(flag, a, b)  # noqa: E731
    return jax.tree.map(where, on_true, on_false)


__all__ = [
    "ExponentialUpdateLossScaleManager",
    "FixedLossScaleManager",
    "LossScaleOptimizer",
    "LossScaleOptimizerState",
    "LossScaleState",
    "LossScaleTransformation",
    "current_loss_scale",
    "find_loss_scale",
]
