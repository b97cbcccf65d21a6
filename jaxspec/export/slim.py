"""Which state leaves an exported function reads, found from its jaxpr.

A SavedModel for serving should hold the variables its graph reads and no others:
tf.estimator's PREDICT graph never built optimizer slots, so its SavedModel held the
model's variables and ``global_step``. A JAX state carries everything (parameters, Adam's
``mu``/``nu``, counters, EMA copies); here each export function is traced with
``jax.make_jaxpr`` and its jaxpr's dead code is removed (``dce_jaxpr``): a leaf whose
input variable no output depends on is not read. Names never decide.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Jaxpr, Literal
from jax.typing import ArrayLike

_log = logging.getLogger("jaxspec")

# ``fn(state, global_step, features, labels)``: an export function's outputs (pytrees of
# arrays; the state, features and labels are pytrees too).
ExportFn = Callable[[Any, Any, Any, Any], Any]
# A state leaf as the export sees it: an array, or its shape and dtype only.
Leaf = jax.Array | np.ndarray | jax.ShapeDtypeStruct


def _dce_used_inputs(jaxpr: Jaxpr) -> list[bool] | None:
    """JAX's own dead-code elimination (sub-jaxprs of scan/cond/pjit included), or None
    where this JAX has none."""
    try:
        from jax.interpreters.partial_eval import dce_jaxpr
    except ImportError:  # pragma: no cover - a JAX without it
        return None
    _, used = dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return list(used)


def walk_used_inputs(jaxpr: Jaxpr) -> list[bool]:
    """Inputs the outputs depend on, walking the equations backwards: an equation with an
    output in use, or with effects (callbacks), uses all its inputs. Conservative: a
    sub-jaxpr (scan, cond, pjit) counts as one equation that reads all it is given."""
    used = {v for v in jaxpr.outvars if not isinstance(v, Literal)}
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in used for v in eqn.outvars):
            used.update(v for v in eqn.invars if not isinstance(v, Literal))
    return [v in used for v in jaxpr.invars]


def leaves_read(fn: ExportFn, state: Any, global_step: ArrayLike, features: Any, labels: Any) -> list[bool]:
    """Per leaf of ``state`` (``jax.tree_util.tree_leaves`` order): whether any output of
    ``fn(state, global_step, features, labels)`` depends on it.

    Args:
      fn: a pure JAX function (an export function, see ``jaxspec.loop.export``).
      state: the state pytree (arrays or ``jax.ShapeDtypeStruct``s; only shapes count).
      global_step, features, labels: example arguments (numpy / JAX arrays, or None);
        their shapes are those traced (e.g. batch 1).

    Raises:
      whatever ``fn`` raises while being traced (e.g. a model_fn's ValueError).
    """
    leaves, treedef = jax.tree_util.tree_flatten(state)

    def flat(leaves: list[Leaf], step: ArrayLike, f: Any, lab: Any) -> Any:
        return fn(jax.tree_util.tree_unflatten(treedef, leaves), step, f, lab)

    closed = jax.make_jaxpr(flat)(leaves, global_step, features, labels)
    used = _dce_used_inputs(closed.jaxpr)
    if used is None:
        used = walk_used_inputs(closed.jaxpr)
    return used[: len(leaves)]


@dataclasses.dataclass(frozen=True)
class SlimState:
    """The state an export holds and its functions taking it.

    Attributes:
      state: the state with every leaf left out replaced by None (same tree otherwise, so
        the leaves kept keep their key paths and variable names).
      fns: ``{mode: fn}`` taking that state; a left-out leaf reaches the model as zeros
        of its shape and dtype (no output depends on it).
      left_out: the key paths (``jax.tree_util.keystr``) of the leaves left out.
      bytes_kept, bytes_total: the leaves' bytes kept and in the whole state.
    """

    state: Any
    fns: Mapping[str, ExportFn]
    left_out: tuple[str, ...]
    bytes_kept: int
    bytes_total: int


def _filler(leaf: jax.Array | np.ndarray) -> Callable[[], jax.Array]:
    """Zeros shaped like ``leaf``, made inside the traced function (no constant)."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        impl, data = jax.random.key_impl(leaf), jax.random.key_data(leaf)
        return lambda: jax.random.wrap_key_data(jnp.zeros(data.shape, data.dtype), impl=impl)
    shape, dtype = np.shape(leaf), jnp.result_type(leaf)
    return lambda: jnp.zeros(shape, dtype)


def _nbytes(leaf: jax.Array | np.ndarray) -> int:
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return int(jax.random.key_data(leaf).nbytes)
    return int(np.prod(np.shape(leaf), dtype=np.int64)) * jnp.result_type(leaf).itemsize


def keep_leaves(state: Any, fns: Mapping[str, ExportFn], keep: Sequence[bool]) -> SlimState:
    """``state`` without the leaves ``keep`` marks False, and ``fns`` wrapped to take it.

    Args:
      state: the state pytree.
      fns: ``{mode: fn(state, global_step, features, labels)}``.
      keep: one bool per leaf of ``state`` (``tree_leaves`` order).

    Raises:
      ValueError: ``keep`` has another length than the state has leaves.
    """
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    if len(keep) != len(with_paths):
        raise ValueError(f"keep has {len(keep)} entries for a state of {len(with_paths)} leaves.")
    leaves = [leaf for _, leaf in with_paths]
    fillers = {i: _filler(leaf) for i, leaf in enumerate(leaves) if not keep[i]}
    slim = jax.tree_util.tree_unflatten(
        treedef, [leaf if k else None for leaf, k in zip(leaves, keep, strict=True)]
    )

    def full(tree: Any) -> Any:
        given = iter(jax.tree_util.tree_leaves(tree))
        return jax.tree_util.tree_unflatten(
            treedef, [fillers[i]() if i in fillers else next(given) for i in range(len(leaves))]
        )

    def wrap(fn: ExportFn) -> ExportFn:
        def slim_fn(tree: Any, step: Any, features: Any, labels: Any) -> Any:
            return fn(full(tree), step, features, labels)

        return slim_fn

    sizes = [_nbytes(leaf) for leaf in leaves]
    return SlimState(
        slim,
        {mode: wrap(fn) for mode, fn in fns.items()},
        tuple(jax.tree_util.keystr(p) for (p, _), k in zip(with_paths, keep, strict=True) if not k),
        sum(s for s, k in zip(sizes, keep, strict=True) if k),
        sum(sizes),
    )


def slim_export(
    state: Any,
    fns: Mapping[str, ExportFn],
    examples: Mapping[str, tuple[Any, Any]],
    trace_fns: Mapping[str, ExportFn] | None = None,
    train_mode: str = "train",
) -> SlimState:
    """Keep the leaves that any exported mode reads (their union: the modes of one
    SavedModel share one set of variables, as in tf.estimator).

    Args:
      state: the restored state.
      fns: ``{mode: fn}``, the export functions (``jaxspec.loop.export``).
      examples: ``{mode: (features, labels)}`` example inputs for the traces.
      trace_fns: functions to trace instead of ``fns[mode]`` (same results; e.g. one
        recording the PREDICT trace's export heads).
      train_mode: the TRAIN ModeKey. A TRAIN export keeps every leaf: its train_op
        assigns each leaf of the new state to its variable (tf.estimator's TRAIN graph
        holds the optimizer's slots too).
    """
    n = len(jax.tree_util.tree_leaves(state))
    keep = [False] * n
    step = jnp.zeros((), jnp.int32)
    for mode, fn in fns.items():
        if mode == train_mode:
            keep = [True] * n
            continue
        features, labels = examples[mode]
        read = leaves_read((trace_fns or {}).get(mode, fn), state, step, features, labels)
        keep = [a or b for a, b in zip(keep, read, strict=True)]
    slim = keep_leaves(state, fns, keep)
    _log.info(
        "export: %d of %d state leaves are read by %s (%.1f of %.1f MiB); the others stay out.",
        n - len(slim.left_out),
        n,
        ", ".join(fns),
        slim.bytes_kept / 2**20,
        slim.bytes_total / 2**20,
    )
    return slim
