"""Loops whose trip count is an argument: one compiled program runs any number of
steps from 1 to its block size (training, and evaluation off the mesh).

A plain Estimator's groups of steps (``jaxspec.loop.grouping``) have many sizes (the
steps between the hooks' steps, a remainder before ``max_steps``, a group cut short
to bound a dispatch). A ``lax.scan`` is compiled once per length; this loop takes its
batches stacked in a block of a fixed size ``K`` and the number of steps ``k <= K``
to run as a traced int32, and runs them in a ``lax.fori_loop`` (an XLA while loop,
as a scan is): one compile serves every group size. Rows ``k..K-1`` of the block are
never read, and the per-step outputs in those rows are zeros.

model_fn is traced once per compile: the step is traced to a jaxpr (which gives the
shapes of the per-step outputs, for the stacked buffers) and that jaxpr is the loop's
body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxspec.engine.steps import EvalLoopOut, LoopFn, TrainLoopOut, TrainStep, _avals, merge_metric_dicts
from jaxspec.spec.fn_types import Features, Labels, State


class StepJaxprs:
    """One step of model_fn traced to a jaxpr once per per-step signature
    (``jax.make_jaxpr``), shared by a mode's block loops of every block size and by a
    trace made before the first step (for the spec's hooks): model_fn is traced once.

    Args:
      body: the step (``StepEngine.train_step`` or ``eval_step``).
    """

    def __init__(self, body: Callable[..., Any]) -> None:
        self.body = body
        self._made: dict[Any, Any] = {}

    def get(self, *args: Any) -> tuple[Any, Any]:
        """``(closed jaxpr, output shapes)`` of the step on ``args`` (arrays, tracers or
        ``jax.ShapeDtypeStruct``s)."""
        leaves, tree = jax.tree.flatten(args)
        sig = (tree, tuple((tuple(np.shape(x)), str(x.dtype)) for x in leaves))  # typed keys too
        if sig not in self._made:
            self._made[sig] = jax.make_jaxpr(self.body, return_shape=True)(*args)
        return self._made[sig]


def train_block_loop(body: TrainStep | StepJaxprs) -> LoopFn:
    """``(state, step, key, steps, features, labels) -> TrainLoopOut`` for one device.

    Args:
      body: one training step (``StepEngine.train_step``), or its StepJaxprs.

    The returned loop takes ``features``/``labels`` stacked ``[K, B, ...]`` and
    ``steps``, an int32 scalar in ``1..K``; it runs ``steps`` steps on rows
    ``0..steps-1`` and returns a TrainLoopOut whose per-step fields have ``K`` rows,
    the first ``steps`` of them computed (the rest zeros: read only the first
    ``steps``). ``step`` in the output is the global step after the steps run.
    """

    jaxprs = body if isinstance(body, StepJaxprs) else StepJaxprs(body)

    def train_block_loop(
        state: State, step: Any, key: Any, steps: Any, features: Features, labels: Labels
    ) -> TrainLoopOut:
        block = (features, labels)
        size = jax.tree.leaves(block)[0].shape[0]
        first = jax.tree.map(lambda x: x[0], block)
        closed, shapes = jaxprs.get((state, step), key, first)
        out_tree = jax.tree.structure(shapes)
        stacked = jax.tree.map(lambda s: jnp.zeros((size, *s.shape), s.dtype), shapes[1])

        def run(i: Any, carry: Any) -> Any:
            st, gs, outs = carry
            batch = jax.tree.map(lambda x: lax.dynamic_index_in_dim(x, i, keepdims=False), block)
            flat = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree.leaves(((st, gs), key, batch)))
            (st, gs), out = jax.tree.unflatten(out_tree, flat)
            outs = jax.tree.map(lambda buf, v: lax.dynamic_update_index_in_dim(buf, v, i, 0), outs, out)
            return st, gs, outs

        state, step, outs = lax.fori_loop(0, steps, run, (state, step, stacked))
        return TrainLoopOut(state, step, *outs)

    return LoopFn(train_block_loop)


class BlockUnsupported(Exception):
    """The eval block loop cannot carry these metric states: a merge changes their
    shapes (a state that concatenates its batches); the caller runs a scan instead."""


def eval_block_loop(body: Callable[..., Any] | StepJaxprs) -> LoopFn:
    """``(state, step, key, steps, features, labels, mask) -> EvalLoopOut`` for one
    device: ``steps`` (int32 scalar in ``1..K``) eval steps on the first rows of a block
    stacked ``[K, B, ...]``, their metric states merged in order.

    Args:
      body: one eval step (``StepEngine.eval_step``), or its StepJaxprs.

    ``host`` and ``hook_values`` of the result have ``K`` rows, the first ``steps`` of
    them computed. Raises BlockUnsupported (while tracing) when merging two metric
    states changes their shapes or dtypes.
    """

    jaxprs = body if isinstance(body, StepJaxprs) else StepJaxprs(body)

    def eval_block_loop(
        state: State, step: Any, key: Any, steps: Any, features: Features, labels: Labels, mask: Any
    ) -> EvalLoopOut:
        block = (features, labels, mask)
        size = jax.tree.leaves(block)[0].shape[0]
        first = jax.tree.map(lambda x: x[0], block)
        closed, shapes = jaxprs.get(state, step, key, first)
        states = shapes[0]
        if _avals(jax.eval_shape(merge_metric_dicts, states, states)) != _avals(states):
            raise BlockUnsupported("a metric state changes its shape when merged")
        out_tree = jax.tree.structure(shapes)
        merged0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), states)
        stacked = jax.tree.map(lambda s: jnp.zeros((size, *s.shape), s.dtype), shapes[1:])

        def run(i: Any, carry: Any) -> Any:
            merged, outs = carry
            batch = jax.tree.map(lambda x: lax.dynamic_index_in_dim(x, i, keepdims=False), block)
            flat = jax.core.eval_jaxpr(
                closed.jaxpr, closed.consts, *jax.tree.leaves((state, step, key, batch))
            )
            new, *out = jax.tree.unflatten(out_tree, flat)
            both = merge_metric_dicts(merged, new)
            merged = jax.tree.map(lambda a, b: jnp.where(i == 0, a, b), new, both)
            outs = jax.tree.map(
                lambda buf, v: lax.dynamic_update_index_in_dim(buf, v, i, 0), outs, tuple(out)
            )
            return merged, outs

        merged, (host, hook_values) = lax.fori_loop(0, steps, run, (merged0, stacked))
        return EvalLoopOut(merged, host, hook_values)

    return LoopFn(eval_block_loop)
