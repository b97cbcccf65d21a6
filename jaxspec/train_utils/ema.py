"""``ExponentialMovingAverage``: averaged weights kept in the train state, with
``tf.train.ExponentialMovingAverage``'s rule.

TF keeps one shadow variable per variable and ``ema.apply`` updates them inside the
train_op; here the shadows are an explicit ``EMAState`` the model_fn keeps next to its
train state (``{"ts": ..., "ema": ...}``) and updates from the new parameters, so they
are checkpointed, restored and exported with it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxspec._checks import is_floating, type_name
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree


class EMAState(NamedTuple):
    """The shadow values: ``average`` has the tree, shapes and dtypes of the params."""

    average: PyTree


class ExponentialMovingAverage:
    """Moving averages of parameters, as ``tf.train.ExponentialMovingAverage``.

    Each update moves every floating leaf's shadow towards the new value:
    ``shadow -= (1 - d) * (shadow - value)``, computed in float32 and stored in the
    leaf's dtype. ``d`` is ``decay``, or with ``num_updates`` (TF's ``num_updates``
    argument, given the global step) ``min(decay, (1 + t) / (10 + t))`` at step ``t``,
    so the first averages follow the parameters closely. Leaves that are not floating
    (counters, keys) are copied, as TF averages only float variables. TF's
    ``zero_debias`` is not offered: the shadow starts at the initial value, as TF's does
    without it.

    Args:
      decay: the decay, a float in [0, 1] (TF recommends values close to 1: 0.999).
      num_updates: whether the decay ramps up with the step ``t`` passed to ``update``.

    Raises:
      TypeError: decay is not a number.
      ValueError: decay is outside [0, 1].
    """

    def __init__(self, decay: float, num_updates: bool = True) -> None:
        if isinstance(decay, bool) or not isinstance(decay, int | float):
            raise TypeError(f"ExponentialMovingAverage: decay must be a float, got {type_name(decay)}.")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"ExponentialMovingAverage: decay must be in [0, 1], got {decay}.")
        self.decay = float(decay)
        self.num_updates = bool(num_updates)

    def init(self, params: PyTree) -> EMAState:
        """The first shadows: a copy of ``params`` (a pytree of arrays)."""
        return EMAState(jax.tree.map(jnp.array, params))

    def decay_at(self, global_step: ArrayLike) -> Array:
        """The decay used by the update at ``global_step`` (float32 scalar)."""
        decay = jnp.float32(self.decay)
        if not self.num_updates:
            return decay
        t = jnp.asarray(global_step, jnp.float32)
        return jnp.minimum(decay, (1.0 + t) / (10.0 + t))

    def update(self, params: PyTree, ema_state: EMAState, global_step: ArrayLike) -> EMAState:
        """The shadows after one update from ``params`` (the new parameters, same tree
        as ``init``'s) at ``global_step`` (int scalar: the ``global_step`` model_fn gets,
        the updates done before this one; ignored without ``num_updates``).

        Raises:
          ValueError: params and ema_state have different trees (as ``jax.tree.map``).
        """
        one_minus = 1.0 - self.decay_at(global_step)

        def move(shadow: Array, value: Array) -> Array:
            if not is_floating(shadow):
                return value
            s = shadow.astype(jnp.float32)
            return (s - one_minus * (s - value.astype(jnp.float32))).astype(shadow.dtype)

        return EMAState(jax.tree.map(move, ema_state.average, params))

    def average(self, ema_state: EMAState) -> PyTree:
        """The averaged parameters (TF's ``ema.average(var)`` for every variable)."""
        return ema_state.average


__all__ = ["EMAState", "ExponentialMovingAverage"]
