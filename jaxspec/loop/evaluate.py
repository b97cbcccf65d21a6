"""The evaluation loop: streamed metric states, padded final batch, eval summaries."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxspec._trees import named_leaves
from jaxspec.engine.multihost import to_host
from jaxspec.engine.steps import merge_metric_dicts
from jaxspec.hooks.call_progress import EvalProgressHook
from jaxspec.loop.dispatch_bound import block_rows
from jaxspec.loop.grouping import (
    Chunk,
    block_steps,
    dispatch_chunks,
    group_limit,
    groups_steps,
    split_sizes,
    trimmed,
)
from jaxspec.loop.hook_runner import HookRunner, last_step_values
from jaxspec.loop.phase import Phase
from jaxspec.loop.pipeline import InFlight, run_pipelined
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.short_batch import UnweightedPadding
from jaxspec.spec.fn_types import Hooks, InputFn
from jaxspec.spec.hooks import NEVER, declared_step
from jaxspec.store import summaries

_log = logging.getLogger("jaxspec")
_merge = jax.jit(merge_metric_dicts)


_FIRST_GROUP = 8  # batches of a grouped evaluate's first loop (see ramped_size)
EVAL_BLOCK = 64  # the block of the eval block loop (steps), where the group limit allows it
_MAX_SUMMARY_ELEMENTS = 64  # larger arrays are not written as scalars (TF skips all non-scalars)


def _python_value(value: Any) -> Any:
    """A metric value for the caller: Python scalars, numpy arrays for vector values;
    nested dicts/lists/tuples keep their structure."""

    def leaf(x: Any) -> Any:
        arr = np.asarray(x)
        return arr.item() if arr.ndim == 0 else arr

    return jax.tree.map(leaf, value)


def _summary_scalars(results: dict[str, Any]) -> dict[str, Any]:
    """Flatten results into scalar summaries: a nested value's leaves as ``name/key``,
    the elements of an array of up to 64 numbers as ``name/i`` (flat index)."""
    flat: dict[str, Any] = {}
    for tag, leaf in named_leaves(results):
        arr = np.asarray(leaf)
        if arr.size == 1:
            flat[tag] = arr.reshape(())
        elif 1 < arr.size <= _MAX_SUMMARY_ELEMENTS:
            flat.update({f"{tag}/{i}": v for i, v in enumerate(arr.reshape(-1))})
    return flat


def _host_mean(states: list[Any]) -> float:
    """The value of Mean states merged, computed on the host (``total / count`` in
    float32, 0 when ``count`` is not positive, as ``Mean.compute``): no device op is
    queued behind a loop still running, so reading loop k's loss waits for loop k only."""
    parts = to_host([(state.total, state.count) for state in states])
    total, count = (np.float32(sum(np.float32(p[i]) for p in parts)) for i in (0, 1))
    return float(total / count) if count > 0 else 0.0


def eval_dir(model_dir: str, name: str | None) -> str:
    """``model_dir/eval`` or ``model_dir/eval_<name>``, as tf.estimator."""
    return os.path.join(model_dir, "eval" if not name else f"eval_{name}")


def run_evaluate(
    plan: RunPlan,
    input_fn: InputFn,
    steps: int | None,
    hooks: Hooks,
    checkpoint_path: str | None,
    name: str | None,
) -> dict[str, Any]:
    """Body of ``Estimator.evaluate``; see there. Its progress (the bar, the
    ``Evaluation [k/n]`` lines) is an EvalProgressHook's, run after the call's other
    hooks."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
        raise TypeError(f"evaluate: steps must be an int or None, got {type(steps).__name__}.")
    if steps is not None and steps <= 0:
        raise ValueError(f"evaluate: steps must be > 0 or None, got {steps}.")
    phase = Phase(plan)
    if not phase.start(input_fn, checkpoint_path):
        raise ValueError("evaluate: input_fn gave no data.")
    lifecycle = phase.lifecycle
    if lifecycle.restored_step is None:
        _log.info("No checkpoint in %s; evaluating the initial state.", plan.model_dir)
    progress = EvalProgressHook(steps)
    phase.loop.compile_clock.listeners.append(progress.leave_out)
    runner = phase.begin(hooks, after=[progress])
    try:
        phase.prefetch(steps)
        totals, values = _loops(phase, runner, progress, steps)
    finally:
        phase.close()
    if values is None:  # computed here: the loops did not (see jaxspec.loop.eval_totals)
        values = {key: state.compute() for key, state in to_host(totals).items()}
    else:  # computed in the trace, where a state cannot refuse its value: it may here
        for state in (totals or {}).values():
            state.check_result()
    results = {key: _python_value(value) for key, value in to_host(values).items()}
    scalars = _summary_scalars(results)  # as tf.estimator: no global_step scalar in eval/
    results["global_step"] = lifecycle.global_step
    runner.end()
    _log.info(
        "Saving dict for global step %d: %s",
        lifecycle.global_step,
        ", ".join(f"{k} = {v}" for k, v in sorted(results.items())),
    )
    # A new event file, complete on disk when evaluate returns (only this directory's:
    # training may be writing its own).
    summaries.write_event_file(eval_dir(plan.model_dir, name), lifecycle.global_step, scalars)
    return results


def ramped_size(done: int, limit: int) -> int:
    """The size of a grouped eval loop after ``done`` steps: ``_FIRST_GROUP`` steps, then
    the largest power of two up to ``done`` (8, 8, 16, 32, ...), at most ``limit``.

    The devices start once a few batches are read rather than the whole input, and each
    later loop's input is read while the loops before it run; all sizes are powers of
    two (one compilation each, in the first call) until ``limit``."""
    if done < _FIRST_GROUP:
        return min(limit, _FIRST_GROUP)
    return min(limit, 1 << (done.bit_length() - 1))


def _loops(
    phase: Phase, runner: HookRunner, progress: EvalProgressHook, steps: int | None
) -> tuple[Any, Any]:
    """Run the eval loops; the metric states merged over every batch that counts, and
    their values when the loops computed them (else None).

    Loops are dispatched ahead when ``phase.can_work_ahead()`` (see
    ``jaxspec.loop.pipeline``): the devices work while the host merges loop k's states,
    runs its host functions, reads its loss and runs the hooks, which still see each loop
    in order with its exact loss.
    """
    lifecycle, loop = phase.lifecycle, phase.loop
    asked = 0  # input steps (batches, as steps= counts them) read so far: loops dispatched
    totals: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    done = 0
    # One device, one step per run, no hook that needs a step: batches run grouped, in
    # loops growing from _FIRST_GROUP batches.
    grouped = groups_steps(phase.plan) and all(
        declared_step(h, lifecycle.global_step) == NEVER for h in runner.hooks
    )
    limit = phase.iterations_per_loop
    if grouped:
        first_step = phase.feeder.peek_step()
        limit = group_limit(phase.plan.config, first_step[0] if first_step is not None else ())
    mode_cache = phase.plan.compile_cache.modes[phase.mode]
    block = block_steps(mode_cache, [EVAL_BLOCK], limit) if grouped and loop.takes_blocks else None
    padding = UnweightedPadding(
        phase.plan.broadcast and phase.mesh is not None, phase.parts.reads_padding_mask
    )

    def dispatch(previous: InFlight | None, before_run: Callable[[], None] | None) -> InFlight | None:
        nonlocal asked
        n = ramped_size(asked, block or limit) if grouped else limit
        n = n if steps is None else min(n, steps - asked)
        group = phase.next_group(n) if n > 0 else None
        if group is None:
            return None
        first, asked = asked, asked + group.batches
        padding.check(group.mask)
        if before_run is not None:
            before_run()
        before = None if previous is None else previous.out[-1].out.totals
        step = lifecycle.global_step
        if block is not None:  # one program for every size: the block loop
            args = block_rows(group.args, 0, group.steps, block)
            out = loop.dispatch(lifecycle.state, step, *args, totals=before, block_steps=group.steps)
            return InFlight(first, group.batches, [Chunk(step, group.steps, out)])
        sizes = split_sizes(mode_cache, group.steps) if grouped else [group.steps]
        return InFlight(
            first, group.batches, dispatch_chunks(loop, lifecycle.state, step, group.args, sizes, before)
        )

    def account(current: InFlight, state_taken: bool) -> bool:
        nonlocal totals, values, done
        n, chunks = (
            current.steps,
            [c._replace(out=trimmed(c.out, c.steps)) for c in current.out],
        )  # n: input steps
        if chunks[-1].out.totals is not None:  # merged in the loops (jaxspec.loop.eval_totals)
            totals, values = chunks[-1].out.totals, chunks[-1].out.values
        else:
            for c in chunks:
                states = c.out.metric_states
                totals = states if totals is None else _merge(totals, states)
        for c in chunks:
            phase.host_calls(c.out.host, c.steps)
        done += n
        progress.after_batches(done - n, done)
        loss = _host_mean([c.out.metric_states["loss"] for c in chunks])
        hook_values = last_step_values(chunks[-1].out.hook_values)
        return bool(runner.after_run({"loss": loss, "losses": np.reshape(loss, (1,))}, hook_values))

    run_pipelined(dispatch, account, runner.before_run, phase.can_work_ahead())
    return totals, values
