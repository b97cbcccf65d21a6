"""Step grouping for loops of one step per run (a plain Estimator): the steps between
the ones any hook needs run as one compiled loop.

Training and evaluation off the mesh run every group on one program per input shape,
the block loop (``jaxspec.engine.block_loop``): a block of ``K`` steps
(``block_steps``: fixed per Estimator and mode) of which the call runs as many as the
group holds, so no group size compiles a program of its own. An evaluation whose metric
states cannot be carried by it (a merge that changes their shapes) falls back to scans:
a group of ``n`` steps then runs as one scan of ``n`` steps when ``n`` is a power of two
or a size asked for before, else as scans of its binary decomposition (``37 = 32 + 4 +
1``; ``split_sizes``).
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxspec.config.run_config import RunConfig
from jaxspec.engine.multihost import to_host
from jaxspec.loop.plan import RunPlan

MAX_GROUP_STEPS = 1000  # steps of one group with steps_per_execution='auto'
MAX_GROUP_BYTES = 64 << 20  # and of its stacked host input
_MAX_DIRECT = 4  # sizes other than powers of two compiled as one scan, per Estimator and mode

# Per ModeCache (one Estimator's mode): how often each group size was asked for.
_seen: weakref.WeakKeyDictionary[Any, collections.Counter[int]] = weakref.WeakKeyDictionary()


def group_limit(config: RunConfig, first_step: Any) -> int:
    """The most steps one group may hold: ``config.steps_per_execution`` when it is a
    count, else 1000 steps and 64 MiB of stacked host input (``first_step``: one step's
    host arrays)."""
    spe = config.steps_per_execution
    if spe != "auto":
        return int(spe)
    step_bytes = sum(int(np.asarray(x).nbytes) for x in jax.tree.leaves(first_step))
    return max(1, min(MAX_GROUP_STEPS, MAX_GROUP_BYTES // max(step_bytes, 1)))


def groups_steps(plan: RunPlan) -> bool:
    """Whether a call of ``plan`` groups steps: one device, each run one step
    (``iterations_per_loop`` 1, not a duration) and ``steps_per_execution`` not 1."""
    return (
        plan.mesh is None
        and plan.iterations_per_loop == 1
        and plan.loop_duration_secs is None
        and plan.config.steps_per_execution != 1
    )


def split_sizes(mode_cache: Any, n: int) -> list[int]:
    """The scans a group of ``n`` steps runs as (sizes in order, summing to ``n``)."""
    seen = _seen.setdefault(mode_cache, collections.Counter())
    seen[n] += 1
    direct = [k for k, c in seen.items() if c > 1 and k & (k - 1)]
    if n & (n - 1) == 0 or (seen[n] > 1 and n in direct[:_MAX_DIRECT]):
        return [n]
    return [1 << b for b in range(n.bit_length() - 1, -1, -1) if n >> b & 1]


def block_steps(mode_cache: Any, sizes: list[int], limit: int) -> int:
    """The block size K of the TRAIN block loop (``jaxspec.engine.block_loop``): the
    one ``mode_cache`` (an Estimator's TRAIN ModeCache) already uses, else the largest
    of ``sizes`` (the first groups the call's hooks make), at most ``limit``
    (``group_limit``: 1000 steps and 64 MiB of input). Kept per Estimator, so later
    calls reuse the compiled program; a group longer than K runs as several calls."""
    if mode_cache.block_steps is None:
        mode_cache.block_steps = max(1, min(limit, max(sizes, default=1)))
    return max(1, min(limit, mode_cache.block_steps))


_PER_STEP = ("losses", "host", "hook_values", "loss_scales", "learning_rates")


def trimmed(out: Any, steps: int) -> Any:
    """A TrainLoopOut or EvalLoopOut of the block loop cut to the ``steps`` rows that
    ran (its per-step fields as numpy on the host; the state, the step and the metric
    states stay on the devices); ``out`` itself when every per-step field has exactly
    ``steps`` rows."""
    fields = {f: getattr(out, f) for f in _PER_STEP if hasattr(out, f)}
    if all(int(np.shape(x)[0]) == steps for x in jax.tree.leaves(fields)):
        return out
    return out._replace(**{f: jax.tree.map(lambda x: to_host(x)[:steps], v) for f, v in fields.items()})


class Chunk(NamedTuple):
    """One dispatched scan of a group: its first global step, its steps, and what the
    compiled loop returned (a TrainLoopOut or EvalLoopOut)."""

    first: int
    steps: int
    out: Any


def dispatch_chunks(
    loop: Any, state: Any, first: int, args: tuple[Any, ...], sizes: list[int], totals: Any = None
) -> list[Chunk]:
    """Dispatch ``args`` (host arrays stacked ``[n, ...]``) as scans of ``sizes`` steps,
    each TRAIN scan starting from the previous one's (not yet computed) state; EVAL
    scans all read ``state``, and each takes the metric totals of the one before it
    (``totals``: those before the first; see ``CompiledLoop.dispatch``). No input state
    is kept: with donation it is gone once its scan is dispatched."""
    chunks, at, offset = [], first, 0
    for size in sizes:
        part = args if len(sizes) == 1 else jax.tree.map(lambda x, a=offset, b=offset + size: x[a:b], args)
        out = loop.dispatch(state, at, *part, totals=totals)
        chunks.append(Chunk(at, size, out))
        if hasattr(out, "state"):
            state, at = out.state, at + size
        totals = getattr(out, "totals", None)
        offset += size
    return chunks
