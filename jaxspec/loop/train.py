"""The training loop: loops of iterations_per_loop steps, hooks, summaries, checkpoints.

Where each run is one step (a plain Estimator), the steps between the ones any hook
needs run as one compiled loop (``jaxspec.loop.grouping``; RunConfig's
``steps_per_execution``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxspec.engine.multihost import to_host
from jaxspec.errors import NanLossDuringTrainingError
from jaxspec.hooks.checkpoint import check_saving_listeners
from jaxspec.hooks.estimator_hooks import EstimatorHooks, estimator_hooks
from jaxspec.loop import data_position, watchdog
from jaxspec.loop.dispatch_bound import DispatchBound, dispatch_bounded
from jaxspec.loop.donated_state import KeepAhead, state_free_after, state_read_at
from jaxspec.loop.empty_input import train_without_data
from jaxspec.loop.grouping import Chunk, block_steps, group_limit, groups_steps, trimmed
from jaxspec.loop.hook_runner import HookRunner, last_step_values
from jaxspec.loop.peer_watch import PeerWatch
from jaxspec.loop.phase import Phase
from jaxspec.loop.pipeline import NOT_AHEAD, InFlight, run_pipelined
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.preemption import PreemptionWatcher
from jaxspec.loop.replica_check import ReplicaCheck
from jaxspec.loop.watchdog import HangWatchdog
from jaxspec.spec.fn_types import Hooks, InputFn
from jaxspec.spec.hooks import stop_step
from jaxspec.store import paths, summaries

_log = logging.getLogger("jaxspec")


def check_steps(steps: Any, max_steps: Any) -> None:
    """tf.estimator's rules for ``train(steps=, max_steps=)``.

    Raises:
      ValueError: both given, or either is <= 0.
    """
    if steps is not None and max_steps is not None:
        raise ValueError("train: give steps or max_steps, not both.")
    if steps is not None and steps <= 0:
        raise ValueError(f"train: steps must be > 0, got {steps}.")
    if max_steps is not None and max_steps <= 0:
        raise ValueError(f"train: max_steps must be > 0, got {max_steps}.")


def _last_step(hooks: list[Any], start: int, steps: int | None, max_steps: int | None) -> int | None:
    """The global step training ends at: ``train(steps=)`` from ``start``, or
    ``max_steps``, or the earliest ``last_step()`` a hook names (a stop-at-step hook's);
    None when nothing bounds it."""
    last = max_steps if max_steps is not None else (start + steps if steps is not None else None)
    for h in hooks:
        bound = stop_step(h)
        if bound is not None:
            last = bound if last is None else min(last, bound)
    return last


def _examples_per_step(phase: Phase) -> int | None:
    """The global batch of one step (``examples/sec``): TPUEstimator's
    ``train_batch_size``, else the rows of the first batch's features (a plain
    Estimator's; the first batch stands for every step, as a fixed batch size)."""
    if phase.global_batch_size:
        return int(phase.global_batch_size)
    first = phase.feeder.peek_step()
    leaves = [] if first is None else jax.tree.leaves(first[0][0])
    return int(np.shape(leaves[0])[0]) if leaves and np.ndim(leaves[0]) else None


def run_train(
    plan: RunPlan,
    input_fn: InputFn,
    hooks: Hooks,
    steps: int | None,
    max_steps: int | None,
    saving_listeners: Any,
) -> None:
    """Body of ``Estimator.train``, run from the Estimator's TRAIN plan; see there. Its
    progress (the bar, tf.estimator's lines) is the Estimator's ProgressHook's, drawn
    where the call's console scope (entered by the Estimator) routes it."""
    check_steps(steps, max_steps)
    listeners = check_saving_listeners(saving_listeners, plan.config)
    latest = plan.store.set_aside_damaged()  # the newest intact checkpoint; damaged newer ones moved aside
    if max_steps is not None and latest is not None and latest >= max_steps:
        _log.info("Skipping training: global step %d already reached max_steps=%d.", latest, max_steps)
        return
    position = data_position.DataPosition(plan.store, latest, plan.model_dir)
    phase = Phase(plan, position)
    if not phase.start(input_fn):
        train_without_data(plan, input_fn, latest)  # a warning, and TF's step-0 checkpoint
        return
    lifecycle = phase.lifecycle
    hooks = list(hooks or ())
    own = estimator_hooks(
        hooks + list(phase.parts.all_hooks),
        plan.config,
        plan.model_dir,
        listeners,
        phase.store,
        # each checkpoint keeps the input's position
        data_position.checkpoint_extras(position, phase.feeder, lifecycle.global_step),
        _examples_per_step(phase),
        one_step_runs=phase.iterations_per_loop == 1 and plan.loop_duration_secs is None,
        cost=plan.compile_cache.modes[phase.mode].last_cost,  # an earlier call's compile
    )
    phase.loop.on_compile = own.progress.after_compile
    phase.loop.compile_clock.listeners.append(own.progress.leave_out)
    runner = phase.begin(hooks, after=own.all)
    last_step = _last_step(runner.hooks, lifecycle.global_step, steps, max_steps)
    own.progress.set_total(None if last_step is None else last_step - lifecycle.global_step)
    try:
        phase.prefetch(None if last_step is None else last_step - lifecycle.global_step)
        signals = plan.config.preemption_signals
        newest = lambda: _newest_checkpoint(phase)  # noqa: E731
        with (
            HangWatchdog(plan.config.hang_timeout_secs, plan.config.exit_on_hang),
            PeerWatch(plan.config.heartbeat_timeout_secs, newest),
            PreemptionWatcher(lambda: lifecycle.global_step, signals) as preemption,
        ):
            _loops(phase, runner, own, last_step, preemption)
            preemption.reached_last_boundary()  # a second signal no longer ends the save
            runner.end()  # ProgressHook's, the last: "Loss for final step", the bar's end
    finally:
        phase.close()
        watchdog.mark(watchdog.SAVE)
        phase.store.wait()
        summaries.close_all()  # every event is on disk when train returns
    lifecycle.finish()  # the next call starts from memory if this is still on disk
    preemption.exit_if_triggered(lifecycle.global_step)  # SystemExit(143) after a preemption signal


def _newest_checkpoint(phase: Phase) -> str | None:
    """The path of the newest finished checkpoint in the model_dir, for the lost-peer
    report: a listing only (Orbax gives a checkpoint its step's name once it is complete),
    no integrity check, so the report is not delayed by reading a large checkpoint."""
    try:
        steps = [int(name) for name in paths.listdir(phase.store.directory) if name.isdigit()]
    except OSError:
        return None
    return phase.store.path(max(steps)) if steps else None


def _loops(
    phase: Phase,
    runner: HookRunner,
    own: EstimatorHooks,
    last_step: int | None,
    preemption: PreemptionWatcher,
) -> None:
    """Run the training loops, dispatched ahead when ``phase.can_work_ahead()`` (one
    process, loops of a fixed size, no saved input position): see
    ``jaxspec.loop.pipeline``. Loop k+1 starts from loop k's state, not yet computed,
    which it takes (donated): only after a loop whose state no hook reads or may stop
    at (``donated_state.state_free_after``, the hooks' own answers); hooks then see
    ``session.state`` None."""
    lifecycle, loop = phase.lifecycle, phase.loop
    if groups_steps(phase.plan) and not runner.some_hook_runs_every_step(lifecycle.global_step):
        _grouped_loops(phase, runner, own, last_step, preemption)
        return
    duration = phase.plan.loop_duration_secs
    loops = 0
    replicas = ReplicaCheck(phase.mesh)  # warns once if the copies differ

    affordable = KeepAhead()

    def dispatch(previous: InFlight | None, before_run: Callable[[], None] | None) -> Any:
        if previous is None:
            first, state = lifecycle.global_step, lifecycle.state
        else:
            first, state = previous.first + previous.steps, previous.out.state
            if before_run is None and (preemption.triggered or state_read_at(runner.hooks, first)):
                return NOT_AHEAD  # a hook (a save due) reads this state first, at one state's memory
        # Ahead of a hook that may read this state (or stop here), the loop keeps it.
        keep = before_run is None and previous is not None and not state_free_after(runner.hooks, first)
        if keep and not affordable.second_state(state):
            return NOT_AHEAD  # a second state would not fit: run after the hooks instead
        if previous is not None:
            replicas.after_loop(state, first)  # before the next loop takes the state
        n = (
            phase.iterations_per_loop
            if last_step is None
            else min(phase.iterations_per_loop, last_step - first)
        )
        group = phase.next_group(n) if n > 0 else None
        if group is None:
            return None
        if before_run is not None:
            before_run()
        took = before_run is None and previous is not None and not keep  # ahead, donating
        return InFlight(first, group.steps, loop.dispatch(state, first, *group.args, keep_state=keep), took)

    def account(current: InFlight, state_taken: bool) -> bool:
        nonlocal loops
        started = time.perf_counter()
        first, n, out, _ = current
        stop = _account(phase, runner, own, [Chunk(first, n, out)], state_taken)
        loops += 1
        if duration is not None and loops == 2:  # loop 1 compiled; loop 2 measures a step
            per_step = (time.perf_counter() - started) / n
            phase.iterations_per_loop = max(1, min(100_000, int(duration / max(per_step, 1e-9))))
            _log.info("iterations_per_loop=%ss: %d steps per loop.", duration, phase.iterations_per_loop)
        # every process agrees on a preemption stop here (first: all take part in every round)
        return preemption.stop_here(lifecycle.global_step) or bool(stop)  # a stop keeps the state

    run_pipelined(dispatch, account, runner.before_run, phase.can_work_ahead())
    if lifecycle.state is not None:
        replicas.finish(lifecycle.state, lifecycle.global_step)


def _account(
    phase: Phase,
    runner: HookRunner,
    own: EstimatorHooks,
    chunks: list[Chunk],
    state_taken: bool = False,
    iterations: int | None = None,
) -> bool:
    """One loop's results (its scans ``chunks``, in order): NaN check, the lifecycle
    advanced, host calls, ProgressHook's summaries, lines and bar, the hooks' after_run.
    True: a hook asked to stop. ``state_taken``: a loop dispatched ahead took the last
    chunk's state (donated), so the hooks see ``session.state`` None. ``iterations``:
    the steps the hooks' run stood for, when fewer than ``before_run`` was told (a group
    a SIGTERM cut short).

    Raises:
      NanLossDuringTrainingError: a step's loss is NaN (at that step's global step).
    """
    lifecycle = phase.lifecycle
    watchdog.mark(watchdog.DEVICE if jax.process_count() == 1 else watchdog.COLLECTIVE)
    chunks = [c._replace(out=trimmed(c.out, c.steps)) for c in chunks]  # a block loop's rows that ran
    per_chunk = [to_host(c.out.losses) for c in chunks]  # [steps, replicas] each
    losses = np.concatenate([x[:, 0] if x.shape[1] == 1 else x.mean(axis=1) for x in per_chunk])
    first, n = chunks[0].first, len(losses)
    if np.isnan(losses).any():
        raise NanLossDuringTrainingError(first + int(np.argmax(np.isnan(losses))))
    if first != lifecycle.global_step:
        raise AssertionError(f"loop from step {first} accounted at step {lifecycle.global_step}")
    lifecycle.advance(chunks[-1].out, n, donated=state_taken)
    watchdog.step_ended(lifecycle.global_step)
    for c in chunks:
        phase.host_calls(c.out.host, c.steps, c.first)
    own.progress.after_loop(  # its lines, summaries and bar
        first, losses, _per_step(chunks, "loss_scales"), _per_step(chunks, "learning_rates")
    )
    values = {"loss": losses[-1], "losses": losses}
    spec_values = last_step_values(chunks[-1].out.hook_values)
    return bool(runner.after_run(values, spec_values, iterations=iterations))


def _per_step(chunks: list[Chunk], field: str) -> np.ndarray | None:
    """A TrainLoopOut field ``[steps, replicas]`` of every chunk, replica 0's, as one
    ``[steps]`` array; None when the loop has none."""
    if getattr(chunks[0].out, field) is None:
        return None
    return np.concatenate([to_host(getattr(c.out, field))[:, 0] for c in chunks])


def _planned_sizes(runner: HookRunner, start: int, last_step: int | None, limit: int) -> list[int]:
    """The sizes of the first groups a call from global step ``start`` makes (at most
    four): up to the next step a hook needs, ``last_step`` and ``limit``."""
    sizes: list[int] = []
    at = start
    while len(sizes) < 4:
        n = min(limit, runner.next_needed_step(at) - at)
        if last_step is not None:
            n = min(n, last_step - at)
        if n <= 0:
            break
        sizes.append(n)
        at += n
    return sizes


def _grouped_loops(
    phase: Phase,
    runner: HookRunner,
    own: EstimatorHooks,
    last_step: int | None,
    preemption: PreemptionWatcher,
) -> None:
    """Run the steps up to the next one any hook needs (at most ``group_limit``, and
    never past ``last_step``, a shape change or the input's end) as one loop.

    When ``phase.can_work_ahead()``, loop k+1 is dispatched before loop k is accounted
    for, taking (donating) loop k's state, where no hook reads that state or may stop
    at that step (``donated_state.state_free_after``: tf.estimator's default hooks);
    otherwise (a save due, a user's hook) loop k+1's input is read while loop k runs and
    dispatched once loop k is accounted for, so hooks read loop k's output state first
    and a stop keeps it.

    Every loop runs on one compiled program, the block loop (``block_steps``: its block
    of K steps is fixed per Estimator, the steps it runs are an argument), as calls of
    at most about ``DISPATCH_SECS`` each, at most two on the devices (``DispatchBound``). A SIGTERM stops reading a group's input at the next
    step and dispatches nothing more: a group being read is dropped, one being
    dispatched ends after its scans already dispatched (it is not finished). Where the
    input's position is saved, every step read must be trained (the position cannot go
    back): groups are then one bounded scan long, and the steps read are trained."""
    lifecycle, loop = phase.lifecycle, phase.loop
    pending_first = phase.feeder.peek_step()
    limit = group_limit(phase.plan.config, pending_first[0] if pending_first is not None else ())
    mode_cache = phase.plan.compile_cache.modes[phase.mode]
    block = block_steps(mode_cache, _planned_sizes(runner, lifecycle.global_step, last_step, limit), limit)
    bound = DispatchBound(mode_cache, limit, lambda: preemption.triggered)
    preemption.progress = lambda: max(lifecycle.global_step, bound.done_step)
    read_ahead: list[tuple[int, Any]] = []  # [(first step, LoopInput) read, not dispatched]
    iterations = [1]  # steps of the latest loop dispatched: its run_context.iterations
    stopped = lambda: preemption.triggered  # noqa: E731
    tracked = phase.position is not None and phase.position.tracking  # the input's position is saved

    def read(first: int) -> Any:
        if read_ahead and read_ahead[0][0] == first:
            return read_ahead.pop()[1]
        n = min(limit, runner.next_needed_step(first) - first)
        if last_step is not None:
            n = min(n, last_step - first)
        if tracked:  # every step read is trained: a group is one bounded dispatch
            n = min(n, bound.cap())
        return phase.next_group(n, stop=stopped) if n > 0 else None

    def dispatch(previous: InFlight | None, before_run: Callable[[], None] | None) -> Any:
        if previous is None:
            first, state = lifecycle.global_step, lifecycle.state
        else:
            first, state = previous.first + previous.steps, previous.out[-1].out.state
        group = read(first)
        if group is None or not (bound.may_dispatch() or tracked):
            return None  # the input ended, or a SIGTERM came: a group read is dropped (no saved position)
        if before_run is None:  # ahead: only where loop k's state is nobody's
            if not state_free_after(runner.hooks, first):
                read_ahead[:] = [(first, group)]  # dispatched after loop k is accounted for
                return NOT_AHEAD
        iterations[0] = group.steps
        if before_run is not None:
            before_run()
        chunks = dispatch_bounded(loop, bound, state, first, group.args, block, stoppable=not tracked)
        steps = sum(c.steps for c in chunks)
        iterations[0] = steps
        return InFlight(first, steps, chunks, took_previous=before_run is None)  # ahead: it took loop k's

    def account(current: InFlight, state_taken: bool) -> bool:
        watchdog.mark(watchdog.DEVICE)
        bound.wait_through(current.first + current.steps)  # times its scans
        stop = _account(phase, runner, own, current.out, state_taken, iterations=current.steps)
        return preemption.stop_here(lifecycle.global_step) or stop  # a stop keeps the state here

    before_run = lambda: runner.before_run(iterations[0])  # noqa: E731
    run_pipelined(dispatch, account, before_run, phase.can_work_ahead())
