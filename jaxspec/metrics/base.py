"""Metric states: the JAX form of tf.compat.v1.metrics' ``(value, update_op)`` pairs.

A metric function (``jaxspec.metrics.mean(values)``) returns a *state* holding the
statistics of one batch. The eval loop merges the states of every batch (and replica)
and calls ``compute()`` once at the end, which is what running ``update_op`` per batch and
reading ``value`` once does in TensorFlow. States are pytrees (flax struct dataclasses),
so they can be carried through a compiled ``lax.scan``.

Padding: while the engine traces a model_fn or metric_fn in EVAL it sets a padding mask
(1.0 for real rows, 0.0 for the rows that pad a final partial batch). Every metric
function multiplies its weights by that mask, so padded rows never count.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

_PADDING_MASK: contextvars.ContextVar[Any] = contextvars.ContextVar("jaxspec_padding_mask", default=None)


@contextlib.contextmanager
def padding_mask_scope(mask: Any) -> Iterator[None]:
    """Within the block, metric functions weight rows by ``mask`` (float ``[batch]``)."""
    token = _PADDING_MASK.set(mask)
    try:
        yield
    finally:
        _PADDING_MASK.reset(token)


def current_padding_mask() -> Any:
    """The active padding mask (float ``[batch]``), or None outside an EVAL trace."""
    return _PADDING_MASK.get()


def apply_padding_mask(values: jax.Array, weights: Any) -> jax.Array:
    """Return float weights broadcast to ``values``' shape, times the active padding mask.

    ``weights`` None means 1. A mask of shape ``[batch]`` multiplies along axis 0 of
    ``values``; a scalar ``values`` (say a batch loss) is weighted by the fraction of real
    rows in the batch, so a batch counts in proportion to its real examples.

    Raises:
      ValueError: ``weights`` cannot be broadcast to ``values``' shape.
    """
    values = jnp.asarray(values)
    w = jnp.ones(values.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    try:
        w = jnp.broadcast_to(w, values.shape)
    except ValueError as e:
        raise ValueError(
            f"weights of shape {tuple(w.shape)} cannot be broadcast to values of shape "
            f"{tuple(values.shape)}."
        ) from e
    mask = current_padding_mask()
    if mask is None:
        return w
    mask = jnp.asarray(mask, jnp.float32)
    if values.ndim == 0:
        return w * jnp.mean(mask)
    if values.shape[0] != mask.shape[0]:
        raise ValueError(
            f"metric values have {values.shape[0]} rows on axis 0 but the batch has "
            f"{mask.shape[0]}; eval metric inputs must keep the batch on axis 0."
        )
    return w * mask.reshape(mask.shape + (1,) * (values.ndim - 1))


class Metric(struct.PyTreeNode):
    """Base class of metric states: mergeable, computed once at the end.

    A subclass holds its statistics as array fields and implements ``compute()``. The
    default ``merge`` adds the fields leaf by leaf and ``empty`` is all zeros, which is
    right for every sum-based statistic (totals, counts, confusion counts: the whole
    tf.compat.v1.metrics family); override both for anything else (a max, say).
    """

    def empty(self) -> Metric:
        """The identity of ``merge``: a state that has seen no data."""
        return jax.tree.map(jnp.zeros_like, self)

    def merge(self, other: Metric) -> Metric:
        """Combine two states of the same metric (batches, replicas or processes)."""
        return jax.tree.map(jnp.add, self, other)

    def compute(self) -> Any:
        """The metric's value from the accumulated state."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute().")


def is_metric_state(x: Any) -> bool:
    """True for a jaxspec metric state or any object with ``merge`` and ``compute``."""
    return isinstance(x, Metric) or (callable(getattr(x, "merge", None)) and callable(getattr(x, "compute", None)))


def as_metric_state(value: Any, name: str = "") -> Metric:
    """Normalise an ``eval_metric_ops`` value into a metric state the loop can merge.

    Accepts a metric state (anything with ``merge`` and ``compute``). Other forms
    (``(value, update)`` pairs, Keras-style objects) raise TypeError until supported.

    Raises:
      TypeError: ``value`` is not a supported metric form.
    """
    if is_metric_state(value):
        return value
    raise TypeError(
        f"eval_metric_ops[{name!r}]: only jaxspec metric states (merge/compute) are supported, "
        f"got {type(value).__name__}."
    )
