"""Metric states merged inside the eval loop: each loop takes the totals of the loops
before it and returns them merged with its own, so an evaluation dispatches one
computation per loop and nothing between loops.

A separate merge per loop costs a dispatch on every backend, and on the CPU backend,
where a computation dispatched while another runs waits for it, it also stalls the host
until the loop dispatched ahead ends, leaving the devices idle while the host then reads
and dispatches the next loop. The merge runs after the loop's own steps, in the same
executable: no extra trace of model_fn (the carrying function calls the jitted loop,
whose trace jit caches) and no extra compilation.

Each loop also computes the metrics' values from its totals (``compute()``), so the
last loop's are the results and nothing is computed after it; a ``compute`` that cannot
be traced (one that reads values on the host) is left to the caller, at the end.

The first loop gets zeros and a False flag, and keeps its own states (``where``, so a
metric need not define an identity state). Metric states whose merge changes their
shapes or dtypes (a state that concatenates batches) cannot be carried through a fixed
executable: their loops return their states alone and the caller merges them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxspec.engine.mesh import replicated
from jaxspec.engine.steps import merge_metric_dicts


def _abstract(tree: Any, sharding: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def _signature(tree: Any) -> Any:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [(tuple(x.shape), np.dtype(x.dtype)) for x in leaves]


def compute_all(states: dict[str, Any]) -> dict[str, Any]:
    """Each metric's value: ``{name: state.compute()}``."""
    return {name: state.compute() for name, state in states.items()}


class TotalsSpec(NamedTuple):
    """How a carrying loop is lowered: ``totals``, the abstract totals' leaves
    (``jax.ShapeDtypeStruct``, replicated on the mesh), and ``computes``, whether it
    computes the values too. Totals enter a loop as their leaves: a retrace for another
    input shape may build states with other static fields (a metric_fn's lambdas), and
    each loop rebuilds them with its own trace's structure."""

    totals: Any
    computes: bool


def totals_spec(loop: Any, specs: tuple[Any, ...], mesh: Mesh | None) -> TotalsSpec | None:
    """How to carry the totals of ``loop`` (the jitted eval loop) for arguments shaped
    like ``specs``, or None when a merge changes the states' shapes, dtypes or structure.
    Traces ``loop`` (jit keeps the trace for the carrying loop)."""
    states = loop.trace(*specs).out_info.metric_states
    merged = jax.eval_shape(merge_metric_dicts, states, states)
    if _signature(merged) != _signature(states):
        return None
    try:
        jax.eval_shape(compute_all, states)
        computes = True
    except Exception:  # noqa: BLE001 - a compute() that needs concrete values runs at the end
        computes = False
    return TotalsSpec(jax.tree.leaves(_abstract(states, replicated(mesh))), computes)


def carrying_loop(loop: Any, mesh: Mesh | None) -> Any:
    """``jax.jit`` of ``(state, step, key, *batch, totals, has_totals, computes) ->
    EvalLoopOut``: ``loop``'s output with ``metric_states`` cut to this loop's ``'loss'``
    (what hooks read), ``totals``: ``merge(totals, states)`` where ``has_totals`` (a bool
    scalar), else the loop's own states, replicated on the mesh, and with ``computes``
    (static) ``values``: ``compute_all(totals)``. ``totals`` are given as the list of
    the previous totals' leaves."""
    sharding = replicated(mesh)

    def carrying(state: Any, step: Any, key: Any, *rest: Any) -> Any:
        *batch, totals, has_totals, computes = rest
        out = loop(state, step, key, *batch)
        states = out.metric_states
        merged = merge_metric_dicts(jax.tree.unflatten(jax.tree.structure(states), totals), states)
        running = jax.tree.map(lambda m, s: jnp.where(has_totals, m, s), merged, states)
        if sharding is not None:
            running = jax.lax.with_sharding_constraint(running, sharding)
        values = compute_all(running) if computes else None
        return out._replace(metric_states={"loss": states["loss"]}, totals=running, values=values)

    return jax.jit(carrying, static_argnums=-1)


def flag_spec(mesh: Mesh | None) -> jax.ShapeDtypeStruct:
    """The abstract ``has_totals`` argument."""
    return jax.ShapeDtypeStruct((), jnp.bool_, sharding=replicated(mesh))


class StartTotals:
    """A carrying loop's extra arguments, put on the devices once per shape signature:
    zeros shaped like the totals and the two flags."""

    def __init__(self, specs: Any, mesh: Mesh | None) -> None:
        sharding = replicated(mesh)
        zeros = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), specs)
        self.zeros = jax.device_put(zeros, sharding)
        self.no, self.yes = (jax.device_put(np.bool_(v), sharding) for v in (False, True))

    def arguments(self, totals: Any) -> tuple[Any, Any]:
        """``(leaves of totals, True)``, or ``(zeros, False)`` for the first loop
        (``totals`` None).

        Raises:
          ValueError: ``totals`` (a loop's of another input shape) have other shapes or
            dtypes than this loop's states: they cannot be merged.
        """
        if totals is None:
            return self.zeros, self.no
        leaves = jax.tree.leaves(totals)
        if [(x.shape, x.dtype) for x in leaves] != [(z.shape, z.dtype) for z in self.zeros]:
            raise ValueError(
                "evaluate: the metric states of batches of different shapes have different "
                "shapes and cannot be merged; give every eval batch the same shape."
            )
        return leaves, self.yes
