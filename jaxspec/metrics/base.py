"""Metric states: the JAX form of tf.compat.v1.metrics' ``(value, update_op)`` pairs.

A metric function (``jaxspec.metrics.mean(values)``) returns a *state* holding the
statistics of one batch. The eval loop merges the states of every batch (and replica)
and calls ``compute()`` once at the end, which is what running ``update_op`` per batch and
reading ``value`` once does in TensorFlow. States are pytrees (flax struct dataclasses),
so they can be carried through a compiled ``lax.scan``.

Padding: while the engine traces a model_fn or metric_fn in EVAL it sets a padding mask
(1.0 for real rows, 0.0 for the rows that pad a final partial batch). Every metric
function multiplies its weights by that mask (``apply_padding_mask``) and zeroes the
per-row values of padded rows (``drop_padding``), so padded rows never count, even when
the model produced NaN for them.

A user-defined metric subclasses ``Metric`` and provides at least ``compute`` and a way
to build the state of one batch: either the classmethod ``from_batch`` (then ``init``
and ``update`` come for free), or its own ``init`` and ``update``. ``merge`` defaults to
a leafwise sum, which is right for sums and counts; override it (and ``empty``) for
anything else. See ``docs/metrics.md``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any, Protocol, Self, TypeGuard, TypeVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxspec.spec.fn_types import ArrayLike, PyTree

_PADDING_MASK: contextvars.ContextVar[ArrayLike | None] = contextvars.ContextVar(
    "jaxspec_padding_mask", default=None
)

M = TypeVar("M", bound="Metric")


@contextlib.contextmanager
def padding_mask_scope(mask: ArrayLike | None) -> Iterator[None]:
    """Within the block, metric functions weight rows by ``mask`` (float ``[batch]``)."""
    token = _PADDING_MASK.set(mask)
    try:
        yield
    finally:
        _PADDING_MASK.reset(token)


_MASK_READS = [0]  # calls of current_padding_mask() inside an EVAL trace (by model_fns)


def current_padding_mask() -> ArrayLike | None:
    """The active padding mask (float ``[batch]``: 1 for a real row, 0 for padding), or
    None outside an EVAL trace. A model_fn whose eval loss must not count padding rows
    weights them by it: ``jnp.sum(per_row * mask) / jnp.maximum(jnp.sum(mask), 1.0)``."""
    mask = _PADDING_MASK.get()
    if mask is not None:
        _MASK_READS[0] += 1
    return mask


def active_padding_mask() -> ArrayLike | None:
    """``current_padding_mask()`` for jaxspec's own metrics: not counted as a read."""
    return _PADDING_MASK.get()


def padding_mask_reads() -> int:
    """How often ``current_padding_mask()`` was read inside an EVAL trace, so far (the
    engine tells from it whether a model_fn weights its rows)."""
    return _MASK_READS[0]


def _row_mask(values: jax.Array) -> jax.Array | None:
    """The padding mask shaped ``[batch, 1, ...]`` for ``values`` (None without a mask).

    Raises:
      ValueError: ``values`` has rank >= 1 and its axis 0 is not the batch.
    """
    mask = _PADDING_MASK.get()  # not a model_fn's read (padding_mask_reads)
    if mask is None:
        return None
    mask = jnp.asarray(mask, jnp.float32)
    if values.ndim == 0:
        return jnp.mean(mask)
    if values.shape[0] != mask.shape[0]:
        raise ValueError(
            f"metric values have {values.shape[0]} rows on axis 0 but the batch has "
            f"{mask.shape[0]}; eval metric inputs must keep the batch on axis 0."
        )
    return mask.reshape(mask.shape + (1,) * (values.ndim - 1))


def apply_padding_mask(values: jax.Array, weights: ArrayLike | None) -> jax.Array:
    """Return float32 weights broadcast to ``values``' shape, times the active padding mask.

    ``weights`` None means 1. A mask of shape ``[batch]`` multiplies along axis 0 of
    ``values``; a scalar ``values`` (say a batch loss) is weighted by the fraction of real
    rows in the batch, so a batch counts in proportion to its real examples.

    Raises:
      ValueError: ``weights`` cannot be broadcast to ``values``' shape, or ``values``'
        axis 0 is not the batch while a padding mask is active.
    """
    values = jnp.asarray(values)
    w = jnp.ones(values.shape, jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    try:
        w = jnp.broadcast_to(w, values.shape)
    except ValueError as e:
        raise ValueError(
            f"weights of shape {tuple(w.shape)} cannot be broadcast to values of shape {tuple(values.shape)}."
        ) from e
    mask = _row_mask(values)
    return w if mask is None else w * mask


def drop_padding(values: ArrayLike) -> jax.Array:
    """``values`` with the rows of the active padding mask set to 0 (unchanged without one).

    Use it on per-row quantities before multiplying them by weights: a padded row's value
    may be NaN or inf (the model sees rows of zeros), and ``NaN * 0`` is still NaN.
    A scalar ``values`` is returned as is.

    Raises:
      ValueError: ``values``' axis 0 is not the batch while a padding mask is active.
    """
    values = jnp.asarray(values)
    mask = _row_mask(values)
    if mask is None or values.ndim == 0:
        return values
    return jnp.where(mask > 0, values, jnp.zeros((), values.dtype))


def is_concrete(*arrays: PyTree) -> bool:
    """True when none of ``arrays`` is a tracer (the values can be checked on the host)."""
    return not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(arrays))


class Metric(struct.PyTreeNode):
    """Base class of metric states: mergeable, computed once at the end.

    A subclass holds its statistics as array fields (pytree leaves) and its options as
    static fields (``flax.struct.field(pytree_node=False)``, part of the tree structure).
    The default ``merge`` adds the array fields leaf by leaf and ``empty`` is all zeros,
    which is right for every sum-based statistic (totals, counts, confusion counts: the
    whole tf.compat.v1.metrics family); override both for anything else (a max, say).

    Conveniences: ``from_batch`` (classmethod) builds the state of one batch; ``init``
    gives the empty state for inputs like those, and ``state.update(batch...)`` merges in
    another batch's state, reusing the state's static options. The built-in states'
    ``from_batch`` is their ``jaxspec.metrics`` function.
    """

    @classmethod
    def from_batch(cls: type[M], *args: Any, **kwargs: Any) -> M:
        """The state of one batch. Subclasses that rely on ``init``/``update`` define it.

        Raises:
          NotImplementedError: the subclass defines neither ``from_batch`` nor its own
            ``init``/``update``.
        """
        raise NotImplementedError(
            f"{cls.__name__} defines no from_batch(); define it, or define init() and update()."
        )

    @classmethod
    def init(cls: type[M], *args: Any, **kwargs: Any) -> M:
        """The empty state for a batch like ``from_batch(*args, **kwargs)`` would see.

        Only shapes and static options matter; the batch's values are not counted.
        """
        return cls.from_batch(*args, **kwargs).empty()

    def options(self) -> dict[str, Any]:
        """The state's static fields by name: ``from_batch``'s keyword options."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.metadata.get("pytree_node", True)
        }

    def update(self: M, *args: Any, **kwargs: Any) -> M:
        """Merge in the state of another batch: ``merge(from_batch(*args, **options))``.

        The state's static options (``options()``) are passed again, so
        ``auc(l0, p0, num_thresholds=50).update(l1, p1)`` keeps 50 thresholds.
        """
        return self.merge(type(self).from_batch(*args, **{**self.options(), **kwargs}))

    def empty(self: M) -> M:
        """The identity of ``merge``: a state that has seen no data."""
        return jax.tree.map(jnp.zeros_like, self)

    def merge(self: M, other: M) -> M:
        """Combine two states of the same metric (batches, replicas or processes).

        Raises:
          ValueError: the states' structures or static options differ.
        """
        return jax.tree.map(jnp.add, self, other)

    def compute(self) -> PyTree:
        """The metric's value from the accumulated state (an array, or a pytree of arrays)."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute().")

    def check_result(self) -> None:
        """Raise where the merged state (concrete, on the host) cannot give a true value.
        Evaluation calls it on the final totals also when the compiled loops computed the
        values in the trace, where ``compute`` cannot raise. Default: nothing to check.

        Raises:
          ValueError: (subclasses) the state holds statistics that make its value wrong.
        """


def batch_constructor(function_name: str) -> classmethod:
    """A ``from_batch`` for a state class that calls its metric function, looked up by
    name in the class's own module when called (the function is defined after the
    class)."""

    def from_batch(cls: type, *args: Any, **kwargs: Any) -> Any:
        return getattr(sys.modules[cls.__module__], function_name)(*args, **kwargs)

    from_batch.__doc__ = f"The state of one batch: ``{function_name}(*args, **kwargs)``."
    return classmethod(from_batch)


class MetricState(Protocol):
    """What evaluation needs of a metric state (``Metric`` and any other object with
    these two methods): ``merge`` two states, ``compute`` the value."""

    def merge(self, other: Self, /) -> Self: ...

    def compute(self) -> PyTree: ...


def is_metric_state(x: object) -> TypeGuard[MetricState]:
    """True for a jaxspec metric state or any object with ``merge`` and ``compute``."""
    return isinstance(x, Metric) or (
        callable(getattr(x, "merge", None)) and callable(getattr(x, "compute", None))
    )
