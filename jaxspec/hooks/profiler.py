"""``ProfilerHook``: JAX profiler traces of chosen training steps, for TensorBoard's
profile plugin (``tensorboard-plugin-profile``)."""

from __future__ import annotations

import os

from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.spec.hooks import (
    NEVER,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from jaxspec.store import paths


class ProfilerHook(SessionRunHook):
    """Captures JAX profiler traces of training steps (``tf.estimator.ProfilerHook``)
    into ``output_dir/plugins/profile/<run>/*.xplane.pb``, which TensorBoard's profile
    plugin shows. Each compiled call of the loop is annotated with
    ``jax.profiler.StepTraceAnnotation(mode, step_num=g, steps=n)``: the call that starts
    at global step ``g`` and runs ``n`` steps.

    A trace covers a window of global steps: the runs that start at steps ``[a, b)``.
    The loop splits grouped steps at the window's edges (``next_required_step``) and
    dispatches nothing ahead across them, so the annotations in a trace cover exactly
    the window.

    - ``start_step`` given: one window, ``[start_step, start_step + num_steps)``
      (``num_steps`` default 1), traced once; ``start_step`` equal to the first step
      traces the first, compiling, loop.
    - ``save_steps=N``: as tf.estimator, the run ending at the first step ``s + N`` (``s``
      the global step at session creation, at least ``s + 2``) and every N steps after it,
      one step each: a window ``[e - 1, e)`` for each such end ``e``, every one traced.
      The first run, which compiles the loop, is never traced (as tf.estimator, whose
      first traced run is also its ``N``-th). A traced step of a scan size not yet
      compiled still compiles inside the trace, before its annotation. With
      ``iterations_per_loop > 1`` the loops overlapping the window are traced whole; the
      windows stay N steps apart.
    - ``save_secs``: the run after each ``save_secs`` seconds (never the first), again
      and again; with grouped steps it holds the group that follows. A run the loop
      dispatched before the time came is not in it: the trace then holds the next run.

    Each trace is its own run of the profile plugin: the profiler names its directory
    by the second it ended in (``<run>``), and this hook appends the first traced step,
    ``<run>_step_<g>``, so two traces within one second never share a directory (the
    second would overwrite the first's files).

    Args:
      save_steps / save_secs: steps or seconds between traces; exactly one unless
        ``start_step`` is given (then neither).
      output_dir: the trace directory (default: the current directory).
      show_dataflow, show_memory: accepted for compatibility (JAX's trace holds what it
        holds).
      start_step: the first global step of a single traced window (a JAX addition).
      num_steps: the window's steps (default 1; a JAX addition).

    Raises:
      ValueError: a bad combination of save_steps/save_secs/start_step, or num_steps < 1.
    """

    def __init__(
        self,
        save_steps: int | None = None,
        save_secs: float | None = None,
        output_dir: str = "",
        show_dataflow: bool = True,
        show_memory: bool = False,
        start_step: int | None = None,
        num_steps: int | None = None,
    ) -> None:
        if start_step is not None and (save_steps is not None or save_secs is not None):
            raise ValueError("ProfilerHook: give start_step or save_steps/save_secs, not both.")
        if num_steps is not None and (start_step is None or num_steps < 1):
            raise ValueError("ProfilerHook: num_steps must be >= 1 and needs start_step.")
        self._timer = None if start_step is not None else SecondOrStepTimer(save_secs, save_steps)
        self._by_steps = save_steps is not None
        self._every = max(int(save_steps or 1), 1)  # steps between save_steps windows
        self._window: tuple[int, int] | None = None
        if start_step is not None:
            self._window = (int(start_step), int(start_step) + int(num_steps or 1))
        self._output_dir = output_dir or os.getcwd()
        self._tracing = False
        self._traced_from = 0  # the global step the open trace started at
        self._runs_before: set[str] = set()  # the profile plugin's runs when it started
        self._first_run = True

    def after_create_session(self, session: Session, coord: object) -> None:
        """Start counting from the global step at session creation (tf.estimator's)."""
        if self._timer is not None:
            self._timer.update_last_triggered_step(int(session.global_step))
            if self._by_steps:
                self._window = self._next_window(int(session.global_step), first=True)

    def _next_window(self, start: int, first: bool = False) -> tuple[int, int]:
        """The one-step window of the next save_steps trace after step ``start`` (the
        last traced step, or the session's first step: ``first``, when the first run is
        skipped)."""
        assert self._timer is not None
        end = self._timer.next_trigger_step(start)
        assert end is not None
        end = max(end, start + 2) if first else end
        return end - 1, end

    def _window_at(self, step: int) -> tuple[int, int] | None:
        """The window not yet past at global step ``step``: with save_steps, the windows
        after the current one follow every N steps, so the answer does not wait for
        ``after_run`` to move the window on (the loop asks ahead of it)."""
        window = self._window
        if window is None or not self._by_steps or step < window[1]:
            return window
        skipped = (step - window[1]) // self._every + 1
        return window[0] + skipped * self._every, window[1] + skipped * self._every

    def next_required_step(self, global_step: int) -> int:
        """The coming window's edges (a run must end at each): with save_steps every N
        steps; NEVER with save_secs or once a start_step window has passed."""
        window = self._window_at(global_step)
        if window is None:
            return NEVER
        a, b = window
        return a if global_step < a else b if global_step < b else NEVER

    def reads_state_after(self, step: int) -> bool:
        """True at a window's edges only (with save_secs: while a trace is open or due):
        not a read of the state, but the loop then dispatches the next run after this hook
        starts or stops the trace, so the trace holds exactly the runs it stands for."""
        if self._timer is not None and not self._by_steps:  # save_secs: a trace open or due
            return self._tracing or self._timer.should_trigger_for_step(step + 1)
        window = self._window_at(step - 1)  # the window that a run ending at ``step`` meets
        return window is not None and step in window

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Start a trace when the coming run starts the window (or its time is due)."""
        session = run_context.session
        step = 0 if session is None else int(session.global_step)
        if self._window is not None:
            self._window = self._window_at(step)
            assert self._window is not None
            a, b = self._window
            due = step < b and step + max(run_context.iterations, 1) > a  # the run overlaps it
        else:  # save_secs, or a start_step window already traced (no timer)
            timer = self._timer
            due = timer is not None and not self._first_run and timer.should_trigger_for_step(step + 1)
        if due and not self._tracing:
            import jax

            self._runs_before = set(self._runs())
            jax.profiler.start_trace(self._output_dir)
            self._tracing, self._traced_from = True, step
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Stop the trace after the window's last run (or the timed run)."""
        step = int(run_values.results)
        self._first_run = False
        if not self._tracing or (self._window is not None and step < self._window[1]):
            return
        self._stop()
        if self._timer is not None:
            self._timer.update_last_triggered_step(step)
            self._window = self._window_at(step) if self._by_steps else None
        else:
            self._window = None

    def _stop(self) -> None:
        import jax

        jax.profiler.stop_trace()
        self._tracing = False
        for run in sorted(set(self._runs()) - self._runs_before):  # the one this trace wrote
            root = paths.join(self._output_dir, "plugins", "profile")
            paths.move(paths.join(root, run), paths.join(root, f"{run}_step_{self._traced_from}"))

    def _runs(self) -> list[str]:
        """The profile plugin's run directories under ``output_dir``."""
        root = paths.join(self._output_dir, "plugins", "profile")
        return paths.listdir(root) if paths.isdir(root) else []

    def end(self, session: Session) -> None:
        """Close an open trace."""
        if self._tracing:
            self._stop()
