"""The progress output of ``evaluate`` and ``predict`` as hooks, beside train's
``ProgressHook`` (``jaxspec.hooks.estimator_hooks``): each owns a Renderer
(``jaxspec.hooks.progress_render``), begun when the call's hooks begin and ended at its
``end``, and the loop feeds it the batches it accounts for, as it feeds ProgressHook
its steps. Neither reads the state, needs a step or stops the call."""

from __future__ import annotations

from jaxspec.hooks.progress_render import ConsoleRenderer, Renderer
from jaxspec.spec.hooks import NEVER, SessionRunHook


class _CallProgress(SessionRunHook):
    """A progress hook that only draws: it needs no step, reads no state, never stops."""

    renderer: Renderer

    def begin(self) -> None:
        """Begin the renderer (a bar appears on a terminal)."""
        self.renderer.begin(self._total())

    def _total(self) -> int | None:
        return None

    def leave_out(self, seconds: float) -> None:
        """``seconds`` spent compiling (the loop's ``CompileClock``): left out of the
        rate behind the remaining time."""
        self.renderer.leave_out(seconds)

    def end(self, session: object) -> None:
        """End the renderer (the bar's last frame stays)."""
        self.renderer.end()

    def next_required_step(self, global_step: int) -> int:
        """NEVER: it is fed by the loop, not at a step of its own."""
        return NEVER

    def reads_state_after(self, step: int) -> bool:
        """False: it never reads the state."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False


def evaluation_steps_shown(before: int, done: int, steps: int | None) -> list[int]:
    """The ``k`` of tf.estimator's ``Evaluation [k/steps]`` lines after batches
    ``before+1 .. done``: every batch below 20 steps, every ``steps // 10`` from 20 on,
    and the last; none when ``steps`` is None (``before``/``done`` are cut at
    ``steps``: a short batch's extra steps count once)."""
    if steps is None:
        return []
    before, done = min(before, steps), min(done, steps)
    every = 1 if steps < 20 else steps // 10
    return [k for k in range(before + 1, done + 1) if k % every == 0 or k == steps]


class EvalProgressHook(_CallProgress):
    """``evaluate``'s output: the bar (``evaluate``, in batches of ``steps``, None:
    unknown), and tf.estimator's ``Evaluation [k/steps]`` lines at its cadence
    (``evaluation_steps_shown``), each group of them followed by the remaining time
    (``About H:MM:SS remaining: k of steps batches done.``) once a rate is known.

    Args:
      steps: ``evaluate(steps=)``: the batches to run, or None (to the input's end).
      renderer: where it draws (default: a ``ConsoleRenderer`` on the call's route).
    """

    def __init__(self, steps: int | None, renderer: Renderer | None = None) -> None:
        self.steps = steps
        self.renderer = renderer if renderer is not None else ConsoleRenderer("evaluate", "batches")

    def _total(self) -> int | None:
        return self.steps

    def after_batches(self, before: int, done: int) -> None:
        """The loop accounted for batches ``before+1 .. done``: the bar moves to
        ``done`` (at most ``steps``) and the cadence lines follow."""
        if self.steps is not None:
            done = min(done, self.steps)
        self.renderer.update(done)
        shown = evaluation_steps_shown(before, done, self.steps)
        for k in shown:
            self.renderer.line("Evaluation [%d/%d]", k, self.steps, cadence=True)
        if shown:
            self.renderer.remaining_line(shown[-1])  # the count the Evaluation line above showed


class PredictProgressHook(_CallProgress):
    """``predict``'s output: the bar (``predict``, in examples, total unknown) and
    tf.estimator's ``Prediction: N batches, M examples so far.`` line every
    ``log_every`` batches (RunConfig's ``log_step_count_steps``; None or 0: none).

    Args:
      log_every: batches between the lines.
      renderer: where it draws (default: a ``ConsoleRenderer`` on the call's route).
    """

    def __init__(self, log_every: int | None, renderer: Renderer | None = None) -> None:
        self.log_every = log_every or 0
        self.renderer = renderer if renderer is not None else ConsoleRenderer("predict", "examples")
        self._logged = 0

    def begin(self) -> None:
        """Begin the renderer; no batch counted yet."""
        self._logged = 0
        super().begin()

    def after_batches(self, batches: int, examples: int) -> None:
        """``batches`` read so far holding ``examples`` real examples (padding rows not
        counted): the line when a multiple of ``log_every`` was passed, then the bar."""
        if self.log_every and batches // self.log_every > self._logged // self.log_every:
            self.renderer.line("Prediction: %d batches, %d examples so far.", batches, examples, cadence=True)
            self._logged = batches
        self.renderer.update(examples)
