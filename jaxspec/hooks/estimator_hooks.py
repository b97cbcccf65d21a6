"""The hooks an Estimator adds to its own train call, as tf.estimator does: its default
training output (``ProgressHook``) and, when the call has none, a CheckpointSaverHook."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from jaxspec.config.run_config import RunConfig
from jaxspec.hooks.checkpoint import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    LocalCheckpointHook,
    estimator_saver,
)
from jaxspec.hooks.progress_render import ConsoleRenderer, Renderer
from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.loop_cost import LoopCost, table_peak_flops
from jaxspec.spec.hooks import NEVER, Session, SessionRunHook
from jaxspec.store.checkpoints import CheckpointStore
from jaxspec.store.summaries import write_scalars

_NO_ANALYSIS_SAID: set[str] = set()  # platforms whose missing analysis was logged (once per process)


class ProgressHook(SessionRunHook):
    """tf.estimator's default training output, at TF 2.15's steps (its SummarySaverHook,
    StepCounterHook and LoggingTensorHook timers, which first fire at the call's first
    step):

    - ``loss`` (and ``loss_scale``, ``learning_rate`` when the state holds them) in
      model_dir's event file at the call's first step and every ``save_summary_steps``
      after it (steps 1, 11, 21, ... from step 0 with 10);
    - ``global_step/sec`` and ``examples/sec`` (the global batch times the former; a
      plain Estimator's too, where TF wrote it for TPUEstimator only), and ``perf/mfu``
      when a step's FLOPs and the devices' peak are known, at the steps where
      ``log_step_count_steps`` steps have passed since the previous measurement (steps
      11, 21, ... with 10: the first step only starts the clock, so the first loop's
      compile is not timed). The interval of a rate is the wall-clock time (seconds,
      ``time.time()``) from the previous measured step's results reaching the host to
      this one's, less the seconds spent compiling in between (tracing, lowering and
      XLA's compile of each new loop shape, and XLA's compiles of eager operations on
      the loop's thread: ``jaxspec.loop_cost.CompileClock``, told through ``leave_out``), as
      TF's StepCounterHook never timed graph construction. A compile that overlaps a
      loop still running on the devices is left out whole, so such an interval may read
      at most that overlap short;
    - the ``global_step/sec: ...`` and ``loss = ..., step = ...`` lines at those steps
      and at the first one, ``step`` being the global step the last run started from,
      as TF's line shows it (0, 10, 20, ...), with the same interval in ``(... sec)``;
    - at each compile of a loop, XLA's analysis (``jaxspec.loop_cost``): one INFO line
      and, when ``save_summary_steps`` is set, ``perf/flops_per_step`` and ``memory/*``
      at the first summary step from the compiled loop's first step on (the next one
      when another compile's analysis is written at that step: one step per program).

    Summaries are written from the per-step values the loop hands over, so they need no
    dispatch of their own; only the measured steps are loop boundaries.
    ``log_step_count_steps`` None or 0 turns the rate and the lines off.

    Args:
      model_dir: where the event file goes.
      summary_every: RunConfig's ``save_summary_steps`` (steps; None or 0: none).
      log_every: RunConfig's ``log_step_count_steps`` (steps; None or 0: no lines).
      examples_per_step: the global batch size (examples) for ``examples/sec``, or None.
      line: ``line(msg, *args, cadence=True)``, how a log line is printed, or None:
        the renderer's ``line`` (no renderer either: no lines).
      peak_flops: RunConfig's ``peak_flops_per_device`` (FLOP/s), or None for
        ``jaxspec.loop_cost.table_peak_flops``.
      one_step_runs: each run is one step (a plain Estimator, grouped or not); else a
        run is a whole loop (TPUEstimator's ``iterations_per_loop``).
      cost: the LoopCost of an earlier call's compile (for ``perf/mfu`` when this call
        compiles nothing), or None.
      renderer: what it draws its progress on (``jaxspec.hooks.progress_render``),
        begun at ``after_create_session`` and ended at ``end``, or None: no bar. ``estimator_hooks`` gives the
        Estimator's a ``ConsoleRenderer``: the ``train`` bar on a terminal, with the
        loss, ``global_step/sec`` and the remaining time, and the ``About H:MM:SS
        remaining`` line after the measured steps' lines.

    The loop hands it each loop's per-step values (``after_loop``), each compile's
    analysis (``after_compile``) and seconds (``leave_out``), and the call's total
    steps once known (``set_total``); it reads neither the state nor stops training.
    Its ``end`` prints tf.estimator's ``Loss for final step: ...`` and ends the renderer.
    """

    def __init__(
        self,
        model_dir: str,
        summary_every: int | None,
        log_every: int | None,
        examples_per_step: int | None,
        line: Callable[..., None] | None = None,
        peak_flops: float | None = None,
        one_step_runs: bool = True,
        cost: LoopCost | None = None,
        renderer: Renderer | None = None,
    ) -> None:
        self.model_dir, self.summary_every, self.log_every = model_dir, summary_every or 0, log_every or 0
        self.examples_per_step, self.peak_flops, self.one_step_runs = (
            examples_per_step,
            peak_flops,
            one_step_runs,
        )
        self.cost = cost
        self.losses = np.zeros(0)
        self.renderer = renderer
        self._line = line if line is not None else _line_of(renderer)
        self._start = 0
        self._bar_clock = 0.0  # the bar's rate clock (perf_counter), less the compiles since
        self._timer = SecondOrStepTimer(every_steps=self.log_every) if self.log_every else None
        self._pending: list[tuple[int, dict[str, float]]] = []  # (step, compile summaries)
        self._compiling = 0.0  # seconds compiled since the previous measured step (or the start)

    def after_create_session(self, session: Session, coord: object) -> None:
        """Start counting at the current global step; open the event file now, so that
        opening it (a one-off of a fraction of a second) is timed in no rate."""
        self._start = int(session.global_step)
        self._compiling = 0.0
        self._bar_clock = time.perf_counter()
        if self.renderer is not None:
            self.renderer.begin(None)
        if self._timer is not None:
            self._timer.reset()
        if self._timer is not None or self.summary_every:
            write_scalars(self.model_dir, self._start, {})  # no event: the file and its writer

    def next_required_step(self, global_step: int) -> int:
        """The next measured step (the call's first, then ``log_step_count_steps`` after
        the previous one); NEVER when logging is off: summaries need no step, they are
        written from every step's values of a loop."""
        if self._timer is None:
            return NEVER
        last = self._timer.last_triggered_step()
        # Before the first measurement (a loop ahead may ask before it is made): the call's first step.
        base = self._start + 1 if last is None else last
        if global_step < base:
            return base
        return base + ((global_step - base) // self.log_every + 1) * self.log_every

    def reads_state_after(self, step: int) -> bool:
        """False: it reads the values the loop hands it."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def leave_out(self, seconds: float) -> None:
        """``seconds`` spent compiling (the loop's ``CompileClock``): left out of the
        interval the next rate is measured over, and out of the bar's rate."""
        self._compiling += seconds
        self._bar_clock += seconds
        if self.renderer is not None:
            self.renderer.leave_out(seconds)

    def set_total(self, steps: int | None) -> None:
        """The steps this call trains (None: unbounded), once the hooks have begun."""
        if self.renderer is not None:
            self.renderer.set_total(steps)

    def end(self, session: Session) -> None:
        """tf.estimator's ``Loss for final step: ...`` line, then the bar stops (after
        the Estimator's savers' end: its final "Saving checkpoints" line is above it)."""
        self._line("Loss for final step: %s.", self.losses[-1] if len(self.losses) else None, cadence=False)
        if self.renderer is not None:
            self.renderer.end()

    def after_compile(self, cost: LoopCost, first_step: int | None) -> None:
        """One compiled loop's analysis, for the loop whose first dispatch starts after
        global step ``first_step``: logged now, written at the first summary step from
        ``first_step + 1`` on that holds no other compile's."""
        self.cost = cost
        if not cost.analysed:
            if cost.platform not in _NO_ANALYSIS_SAID:
                _NO_ANALYSIS_SAID.add(cost.platform)
                self._line(
                    "XLA gives no cost or memory analysis on %s: no perf/ or memory/ summaries.",
                    cost.platform,
                    cadence=False,
                )
            return
        flops = "unknown" if cost.flops_per_step is None else f"{cost.flops_per_step:.4g}"
        self._line(
            "Compiled a training loop of %s%d steps: %s FLOPs per step on %d devices; per device "
            "%s argument, %s output, %s temporary, %s aliased bytes.",
            "up to " if cost.up_to else "",
            cost.steps,
            flops,
            cost.devices,
            cost.argument_bytes,
            cost.output_bytes,
            cost.temp_bytes,
            cost.alias_bytes,
            cadence=False,
        )
        if first_step is not None and self.summary_every:  # summaries off (0/None): the line only
            self._pending.append((self._summary_step_from(first_step + 1), cost.scalars()))

    def _summary_step_from(self, step: int) -> int:
        """The first summary step (the call's first step, then every
        ``save_summary_steps``) at or after ``step`` that holds no other compile's
        analysis: each compiled program's ``memory/*`` and ``perf/flops_per_step`` land
        on a step of their own, beside the loss."""
        every, base = self.summary_every, self._start + 1
        at = base + max(0, -(-(step - base) // every)) * every
        while any(at == p for p, _ in self._pending):
            at += every
        return at

    def after_loop(
        self,
        first_step: int,
        losses: np.ndarray,
        loss_scales: np.ndarray | None = None,
        learning_rates: np.ndarray | None = None,
    ) -> bool:
        """Record a loop's per-step values for the loop that started after global step
        ``first_step``: ``losses`` (``[steps]``), and the state's loss scale and
        learning rate after each step (``[steps]`` each) when it holds them. True when
        this loop printed TF's log lines (a measured step)."""
        self.losses = losses
        logged = False
        step = first_step + len(losses)
        by_step = self._summaries(first_step, losses, loss_scales, learning_rates)
        if self._timer is not None and self._timer.should_trigger_for_step(step):
            elapsed, steps = self._timer.update_last_triggered_step(step)
            if elapsed is not None:  # the compiles in the interval are not timed
                elapsed = max(elapsed - self._compiling, 1e-9)
            self._compiling = 0.0
            rate = None if elapsed is None or steps is None else steps / elapsed
            if rate is not None:
                by_step.setdefault(step, {}).update(self._rates(rate))
            self._lines(step, len(losses), losses[-1], rate, elapsed)
            logged = True
        for at in sorted(by_step):  # steps ascending: TensorBoard's reader drops older ones after newer
            write_scalars(self.model_dir, at, by_step[at])
        self._draw(step - self._start, losses[-1], logged)
        return logged

    def _draw(self, done: int, loss: float, logged: bool) -> None:
        """The bar at ``done`` steps of this call, with the loss and the rate since
        the call's start (compiles left out); the remaining-time line after the lines
        of a measured step."""
        if self.renderer is None:
            return
        if self.renderer.drawing:
            rate = done / max(time.perf_counter() - self._bar_clock, 1e-9)
            self.renderer.update(done, loss=loss, global_step_per_sec=rate)
        else:
            self.renderer.update(done)  # for the remaining time
        if logged:  # after the lines, at the measured steps
            self.renderer.remaining_line()

    def _summaries(
        self,
        first_step: int,
        losses: np.ndarray,
        loss_scales: np.ndarray | None,
        learning_rates: np.ndarray | None,
    ) -> dict[int, dict[str, Any]]:
        """``{step: scalars}`` of this loop's summary steps and compile analyses."""
        by_step: dict[int, dict[str, Any]] = {}
        end = first_step + len(losses)
        if self.summary_every:
            offset = (first_step - self._start) % self.summary_every  # step _start + 1 is due
            for i in range(
                (self.summary_every - offset) % self.summary_every, len(losses), self.summary_every
            ):
                scalars = by_step.setdefault(first_step + i + 1, {})
                scalars["loss"] = losses[i]
                if loss_scales is not None:
                    scalars["loss_scale"] = loss_scales[i]
                if learning_rates is not None:
                    scalars["learning_rate"] = learning_rates[i]
        due = [p for p in self._pending if p[0] <= end]
        self._pending = [p for p in self._pending if p[0] > end]
        for at, scalars in due:
            by_step.setdefault(at, {}).update(scalars)
        return by_step

    def _rates(self, rate: float) -> dict[str, float]:
        """``global_step/sec`` (steps per second), ``examples/sec`` and ``perf/mfu``."""
        scalars = {"global_step/sec": rate}
        if self.examples_per_step:
            scalars["examples/sec"] = rate * self.examples_per_step
        cost = self.cost
        if cost is not None and cost.flops_per_step is not None:
            peak = self.peak_flops or table_peak_flops(cost.device_kind, cost.platform)
            if peak:
                scalars["perf/mfu"] = cost.flops_per_step * rate / (cost.devices * peak)
        return scalars

    def _lines(self, step: int, n: int, loss: float, rate: float | None, elapsed: float | None) -> None:
        """TF's lines at a measured step: the rates (from the second on), then the loss
        with the global step its run started from."""
        if rate is not None:
            self._line("global_step/sec: %.4g", rate, cadence=True)
            if self.examples_per_step:
                self._line("examples/sec: %.4g", rate * self.examples_per_step, cadence=True)
        run_start = step - (1 if self.one_step_runs else n)
        if elapsed is None:
            self._line("loss = %.6g, step = %d", loss, run_start, cadence=True)
        else:
            self._line("loss = %.6g, step = %d (%.3f sec)", loss, run_start, elapsed, cadence=True)


def _line_of(renderer: Renderer | None) -> Callable[..., None]:
    """The renderer's ``line``, or (no renderer) a line that goes nowhere."""
    if renderer is not None:
        return renderer.line
    return lambda msg, *args, cadence=True: None


class EstimatorHooks(NamedTuple):
    """The Estimator's own hooks of a train call: ``progress`` (a ProgressHook, fed by
    the loop) and ``all``, every one of them in the order they run (after the user's
    and the spec's hooks: the Estimator's saver when it adds one, the local tier's saver
    when the store has a local tier, then progress, so that the savers' lines at the
    call's end come before ``Loss for final step`` and above the bar's last frame)."""

    progress: ProgressHook
    all: list[SessionRunHook]


def estimator_hooks(
    hooks: list[SessionRunHook],
    config: RunConfig,
    model_dir: str,
    listeners: list[CheckpointSaverListener],
    store: CheckpointStore,
    extras: Callable[[int], Mapping[str, bytes]] | None,
    examples_per_step: int | None,
    one_step_runs: bool = True,
    cost: LoopCost | None = None,
    renderer: Renderer | None = None,
) -> EstimatorHooks:
    """The hooks ``Estimator.train`` adds, as tf.estimator does.

    Args:
      hooks: the call's other hooks (the user's and the spec's).
      config: the RunConfig (``save_summary_steps``, ``log_step_count_steps``,
        ``peak_flops_per_device``, ``save_checkpoints_steps``/``_secs``).
      model_dir: the Estimator's model_dir.
      listeners: ``train(saving_listeners=)``, checked by ``check_saving_listeners``.
      store: the CheckpointStore the saver writes to.
      extras: ``global_step -> {file name: bytes}`` saved with each checkpoint (the
        input position), or None.
      examples_per_step: the global batch size (``examples/sec``), or None.
      one_step_runs, cost: as ProgressHook's.
      renderer: the ProgressHook's (default: a ``ConsoleRenderer`` of ``train`` in
        steps, on the running call's route).

    Raises:
      ValueError: as ``estimator_saver`` (listeners next to a CheckpointSaverHook of the
        call's own).
    """
    progress = ProgressHook(
        model_dir,
        config.save_summary_steps,
        config.log_step_count_steps,
        examples_per_step,
        peak_flops=getattr(config, "peak_flops_per_device", None),
        one_step_runs=one_step_runs,
        cost=cost,
        renderer=renderer if renderer is not None else ConsoleRenderer("train", "steps"),
    )
    saver: CheckpointSaverHook | None = estimator_saver(hooks, model_dir, config, listeners, store, extras)
    own: list[SessionRunHook] = [] if saver is None else [saver]
    if store.local_tier is not None:  # RunConfig's local_checkpoint_dir
        own.append(LocalCheckpointHook(store.local_tier, extras))
    return EstimatorHooks(progress, [*own, progress])
