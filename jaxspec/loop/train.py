"""The training loop: loops of iterations_per_loop steps, hooks, summaries, checkpoints.

Where each run is one step (a plain Estimator), the steps between the ones any hook
needs run as one compiled loop (``jaxspec.loop.grouping``; RunConfig's
``steps_per_execution``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxspec.engine.multihost import to_host
from jaxspec.errors import NanLossDuringTrainingError
from jaxspec.hooks.basic import StopAtStepHook
from jaxspec.hooks.checkpoint import CheckpointSaverHook, CheckpointSaverListener
from jaxspec.loop import console, data_position
from jaxspec.loop.donated_state import KeepAhead, state_free_after
from jaxspec.loop.empty_input import train_without_data
from jaxspec.loop.grouping import Chunk, dispatch_chunks, group_limit, groups_steps, split_sizes
from jaxspec.loop.hook_runner import HookRunner, last_step_values
from jaxspec.loop.phase import Phase
from jaxspec.loop.pipeline import NOT_AHEAD, InFlight, run_pipelined
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.preemption import PreemptionWatcher
from jaxspec.loop.replica_check import ReplicaCheck
from jaxspec.spec.fn_types import Hooks, InputFn
from jaxspec.spec.hooks import NEVER, SessionRunHook
from jaxspec.store import summaries
from jaxspec.store.summaries import write_scalars

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


class ProgressHook(SessionRunHook):
    """tf.estimator's default training output: ``loss = ..., step = ...`` and
    ``global_step/sec`` log lines every ``log_step_count_steps``, and the loss of every
    step that is a multiple of ``save_summary_steps`` (plus ``global_step/sec`` and, for
    TPUEstimator, ``examples/sec``) in model_dir's event file. ``log_step_count_steps``
    None or 0 turns the log lines off."""

    def __init__(
        self, model_dir: str, summary_every: int | None, log_every: int | None, examples_per_step: int | None
    ) -> None:
        self.model_dir, self.summary_every, self.log_every = model_dir, summary_every or 0, log_every or 0
        self.examples_per_step = examples_per_step
        self.losses = np.zeros(0)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Start timing at the current global step."""
        self.last_step, self.last_time = int(session.global_step), time.time()

    def next_required_step(self, global_step: int) -> int:
        """The next multiple of ``log_step_count_steps`` (NEVER when logging is off):
        summaries need no step, they are written from every step's loss of a loop."""
        if not self.log_every:
            return NEVER
        return (global_step // self.log_every + 1) * self.log_every

    def after_loop(self, first_step: int, losses: np.ndarray, loss_scales: np.ndarray | None = None) -> None:
        """Record a loop's per-step losses (all of them, not only the last), and the
        state's loss scale after each step when it holds one (``loss_scale``)."""
        step = first_step + len(losses)
        if self.summary_every:
            for i, loss in enumerate(losses):
                if (first_step + i + 1) % self.summary_every == 0:
                    scalars = {"loss": loss}
                    if loss_scales is not None:
                        scalars["loss_scale"] = loss_scales[i]
                    write_scalars(self.model_dir, first_step + i + 1, scalars)
        if not self.log_every or step // self.log_every == self.last_step // self.log_every:
            return
        elapsed = max(time.time() - self.last_time, 1e-9)
        rate = (step - self.last_step) / elapsed
        console.line("loss = %.6g, step = %d (%.3f sec)", losses[-1], step, elapsed, cadence=True)
        console.line("global_step/sec: %.4g", rate, cadence=True)
        scalars = {"global_step/sec": rate}
        if self.examples_per_step:
            scalars["examples/sec"] = rate * self.examples_per_step
        write_scalars(self.model_dir, step, scalars)
        self.last_step, self.last_time = step, time.time()


def _check_listeners(saving_listeners: Any, cfg: Any) -> list[Any]:
    """tf.estimator's rules for ``saving_listeners``.

    Raises:
      TypeError: an entry is not a CheckpointSaverListener.
      ValueError: listeners given while checkpoint saving is off (both intervals None).
    """
    listeners = list(saving_listeners or ())
    for listener in listeners:
        if not isinstance(listener, CheckpointSaverListener):
            raise TypeError(
                f"saving_listeners must hold CheckpointSaverListeners, got {type(listener).__name__}."
            )
    if listeners and not cfg.save_checkpoints_steps and not cfg.save_checkpoints_secs:
        raise ValueError("saving_listeners need checkpoint saving on (save_checkpoints_steps or _secs).")
    return listeners


def _saver_hook(phase: Phase, listeners: list[Any], extras: Any) -> CheckpointSaverHook:
    cfg = phase.plan.config
    steps, secs = cfg.save_checkpoints_steps, cfg.save_checkpoints_secs
    if not steps and not secs:
        secs = float("inf")  # no periodic saves; the final step is still saved in end()
    return CheckpointSaverHook(
        phase.plan.model_dir,
        save_secs=secs or None,
        save_steps=steps or None,
        listeners=listeners,
        store=phase.store,
        extras=extras,
    )


def _last_step(hooks: list[Any], start: int, steps: Any, max_steps: Any) -> int | None:
    last = max_steps if max_steps is not None else (start + steps if steps is not None else None)
    for h in hooks:
        if isinstance(h, StopAtStepHook) and h.last_step is not None:
            last = h.last_step if last is None else min(last, h.last_step)
    return last


def run_train(
    plan: RunPlan,
    input_fn: InputFn,
    hooks: Hooks,
    steps: int | None,
    max_steps: int | None,
    saving_listeners: Any,
) -> None:
    """Body of ``Estimator.train``, run from the Estimator's TRAIN plan; see there."""
    with console.running("train", unit="steps"):
        _run_train(plan, input_fn, hooks, steps, max_steps, saving_listeners)


def _run_train(
    plan: RunPlan,
    input_fn: InputFn,
    hooks: Hooks,
    steps: int | None,
    max_steps: int | None,
    saving_listeners: Any,
) -> None:
    check_steps(steps, max_steps)
    listeners = _check_listeners(saving_listeners, plan.config)
    latest = plan.store.set_aside_damaged()  # the newest intact checkpoint; damaged newer ones moved aside
    if max_steps is not None and latest is not None and latest >= max_steps:
        console.line("Skipping training: global step %d already reached max_steps=%d.", latest, max_steps)
        return
    phase = Phase(plan, data_position.DataPosition(plan.store, latest, plan.model_dir))
    if not phase.start(input_fn):
        train_without_data(plan, input_fn, latest)  # a warning, and TF's step-0 checkpoint
        return
    cfg = plan.config
    progress = ProgressHook(
        plan.model_dir, cfg.save_summary_steps, cfg.log_step_count_steps, phase.global_batch_size
    )
    hooks = list(hooks or ())
    own: list[SessionRunHook] = [progress]
    saver = None
    if not any(isinstance(h, CheckpointSaverHook) for h in hooks + list(phase.parts.all_hooks)):
        # each checkpoint keeps the input's position
        extras = data_position.checkpoint_extras(phase.position, phase.feeder, phase.state.global_step)
        saver = _saver_hook(phase, listeners, extras)
        own.append(saver)  # as tf.estimator: only if none was given
    elif listeners:
        raise ValueError("saving_listeners need the Estimator's own CheckpointSaverHook; pass them to yours.")
    runner = phase.begin(hooks, after=own)
    call = phase.state
    last_step = _last_step(runner.hooks, call.global_step, steps, max_steps)
    console.set_total(None if last_step is None else last_step - call.global_step)
    try:
        phase.prefetch(None if last_step is None else last_step - call.global_step)
        with PreemptionWatcher() as preemption:
            _loops(phase, runner, progress, last_step, preemption)
            runner.end()
        console.line("Loss for final step: %s.", progress.losses[-1] if len(progress.losses) else None)
    finally:
        phase.close()
        phase.store.wait()
        summaries.close_all()  # every event is on disk when train returns
    # The next call starts from memory if this is still on disk.
    call.remember(call.global_step)
    preemption.exit_if_triggered(call.global_step)  # SystemExit(143) after a SIGTERM


def _save_due(hooks: list[Any], step: int) -> bool:
    """Whether a CheckpointSaverHook saves at ``step`` (seconds counted up to now)."""
    return any(isinstance(h, CheckpointSaverHook) and h.due_at(step) for h in hooks)


def _loops(
    phase: Phase,
    runner: HookRunner,
    progress: ProgressHook,
    last_step: int | None,
    preemption: PreemptionWatcher,
) -> None:
    """Run the training loops, dispatched ahead when ``phase.can_work_ahead()`` (one
    process, loops of a fixed size, no saved input position): see
    ``jaxspec.loop.pipeline``. Loop k+1 starts from loop k's state, not yet computed,
    which it takes (donated): only after a loop whose state no hook reads
    (``donated_state.state_free_after``); hooks then see ``session.state`` None."""
    if groups_steps(phase.plan) and not runner.some_hook_runs_every_step(phase.state.global_step):
        _grouped_loops(phase, runner, progress, last_step, preemption)
        return
    call, loop = phase.state, phase.loop
    duration = phase.plan.loop_duration_secs
    loops, start, started_at = 0, call.global_step, time.perf_counter()
    replicas = ReplicaCheck(phase.mesh)  # warns once if the copies differ

    ahead_took: list[InFlight] = []  # [the latest loop whose donated state a loop ahead took]
    own, affordable = (ProgressHook,), KeepAhead()

    def dispatch(previous: InFlight | None, before_run: Callable[[], None] | None) -> Any:
        if previous is None:
            first, state = call.global_step, call.state
        else:
            first, state = previous.first + previous.steps, previous.out.state
            if before_run is None and (preemption.triggered or _save_due(runner.hooks, first)):
                return NOT_AHEAD  # a save reads this state first, at one state's memory
        # Ahead of a hook that may read this state (or stop here), the loop keeps it.
        keep = before_run is None and previous is not None and not state_free_after(runner.hooks, first, own)
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
        elif previous is not None and not keep:
            ahead_took[:] = [previous]
        return InFlight(first, group.steps, loop.dispatch(state, first, *group.args, keep_state=keep))

    def account(current: InFlight) -> bool:
        nonlocal loops
        started = time.perf_counter()
        first, n, out = current
        taken = bool(ahead_took) and ahead_took[-1] is current
        stop = _account(phase, runner, progress, [Chunk(first, n, out)], start, started_at, taken)
        loops += 1
        if duration is not None and loops == 2:  # loop 1 compiled; loop 2 measures a step
            per_step = (time.perf_counter() - started) / n
            phase.iterations_per_loop = max(1, min(100_000, int(duration / max(per_step, 1e-9))))
            _log.info("iterations_per_loop=%ss: %d steps per loop.", duration, phase.iterations_per_loop)
        return bool(stop) or preemption.triggered  # a stop keeps the state at this step

    def finish_ahead(current: InFlight) -> bool:  # the loop ahead took current's state
        return bool(ahead_took) and ahead_took[-1] is current

    run_pipelined(dispatch, account, runner.before_run, phase.can_work_ahead(), finish_ahead)
    if call.state is not None:
        replicas.finish(call.state, call.global_step)


def _account(
    phase: Phase,
    runner: HookRunner,
    progress: ProgressHook,
    chunks: list[Chunk],
    start: int,
    started_at: float,
    state_taken: bool = False,
) -> bool:
    """One loop's results (its scans ``chunks``, in order): NaN check, state and global
    step, host calls, summaries and logs, the hooks' after_run. True: a hook asked to stop.
    ``state_taken``: a loop dispatched ahead took the last chunk's state (donated), so the
    hooks see ``session.state`` None.

    Raises:
      NanLossDuringTrainingError: a step's loss is NaN (at that step's global step).
    """
    call = phase.state
    per_chunk = [to_host(c.out.losses) for c in chunks]  # [steps, replicas] each
    losses = np.concatenate([x[:, 0] if x.shape[1] == 1 else x.mean(axis=1) for x in per_chunk])
    first, n = chunks[0].first, len(losses)
    if np.isnan(losses).any():
        raise NanLossDuringTrainingError(first + int(np.argmax(np.isnan(losses))))
    call.state = None if state_taken else chunks[-1].out.state
    call.global_step = first + n
    for c in chunks:
        phase.host_calls(c.out.host, c.steps, c.first)
    progress.losses = losses
    scales = None if chunks[0].out.loss_scales is None else [to_host(c.out.loss_scales) for c in chunks]
    progress.after_loop(first, losses, None if scales is None else np.concatenate([x[:, 0] for x in scales]))
    if console.has_bar():
        rate = (call.global_step - start) / max(time.perf_counter() - started_at, 1e-9)
        console.update(call.global_step - start, loss=losses[-1], global_step_per_sec=rate)
    values = {"loss": losses[-1], "losses": losses}
    return bool(
        runner.after_run(values, call.state, call.global_step, last_step_values(chunks[-1].out.hook_values))
    )


def _grouped_loops(
    phase: Phase,
    runner: HookRunner,
    progress: ProgressHook,
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
    and a stop keeps it."""
    call, loop = phase.state, phase.loop
    pending_first = phase.feeder.peek_step()
    limit = group_limit(phase.plan.config, pending_first[0] if pending_first is not None else ())
    mode_cache = phase.plan.compile_cache.modes[phase.mode]
    start, started_at = call.global_step, time.perf_counter()
    read_ahead: list[tuple[int, Any]] = []  # [(first step, LoopInput) read, not dispatched]
    ahead_took: list[InFlight] = []  # [the latest loop whose donated state a loop ahead took]
    iterations = [1]  # steps of the latest loop dispatched: its run_context.iterations

    def read(first: int) -> Any:
        if read_ahead and read_ahead[0][0] == first:
            return read_ahead.pop()[1]
        n = min(limit, runner.next_needed_step(first) - first)
        if last_step is not None:
            n = min(n, last_step - first)
        return phase.next_group(n) if n > 0 else None

    def dispatch(previous: InFlight | None, before_run: Callable[[], None] | None) -> Any:
        if previous is None:
            first, state = call.global_step, call.state
        else:
            first, state = previous.first + previous.steps, previous.out[-1].out.state
        group = read(first)
        if group is None:
            return None
        if before_run is None:  # ahead: only where loop k's state is nobody's
            if preemption.triggered or not state_free_after(runner.hooks, first, own=(ProgressHook,)):
                read_ahead[:] = [(first, group)]  # dispatched after loop k is accounted for
                return NOT_AHEAD
            ahead_took[:] = [previous]
        iterations[0] = group.steps
        if before_run is not None:
            before_run()
        sizes = split_sizes(mode_cache, group.steps)
        return InFlight(first, group.steps, dispatch_chunks(loop, state, first, group.args, sizes))

    def taken(current: InFlight) -> bool:  # a loop ahead took current's state
        return bool(ahead_took) and ahead_took[-1] is current

    def account(current: InFlight) -> bool:
        stop = _account(phase, runner, progress, current.out, start, started_at, taken(current))
        return stop or preemption.triggered  # a stop keeps the state at this step

    before_run = lambda: runner.before_run(iterations[0])  # noqa: E731
    run_pipelined(dispatch, account, before_run, phase.can_work_ahead(), taken)
