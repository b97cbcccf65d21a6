"""Standard hooks with tf.estimator's names and arguments.

Values are fetched by name: ``'loss'``, ``'global_step'``, and the names a hook built in
model_fn lists in ``step_tensors()``. A hook whose ``tensors`` hold arrays must be
created inside model_fn and returned in the spec's hooks (the step returns those arrays);
user hooks passed to ``train(hooks=...)`` name values instead. With
``iterations_per_loop > 1`` every hook runs once per loop, and "every N iterations"
counts loops, as in TPUEstimator.

Each hook says which global steps it needs (``next_required_step``), so a plain
Estimator groups the steps in between into one compiled loop; what a hook logs, writes
or saves, and at which step, is the same as with one step per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from jaxspec.errors import NanLossDuringTrainingError
from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.spec.fn_types import ArrayLike
from jaxspec.spec.hooks import (
    NEVER,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from jaxspec.store.summaries import write_scalars

# A hook's ``tensors``: a list of fetch names (``'loss'``, ``'global_step'``), or a dict of
# tag to a fetch name or an array computed in model_fn.
Tensors: TypeAlias = Sequence[str] | Mapping[str, str | ArrayLike]

_log = logging.getLogger("jaxspec")


def timer_step(timer: SecondOrStepTimer | None, global_step: int) -> int:
    """The next global step a hook driven by ``timer`` needs: its next steps trigger,
    or NEVER for a seconds timer (checked at the end of every loop) or no timer."""
    step = None if timer is None else timer.next_trigger_step(global_step)
    return NEVER if step is None else step


def _split_tensors(tensors: Tensors) -> tuple[dict[str, str], dict[str, ArrayLike]]:
    """``{tag: name}`` to fetch, and ``{tag: array}`` to return from the step."""
    given = {t: t for t in tensors} if isinstance(tensors, (list, tuple)) else tensors
    if not isinstance(given, dict):
        raise TypeError(f"tensors must be a dict, list or tuple, got {type(given).__name__}.")
    names = {tag: (v if isinstance(v, str) else tag) for tag, v in given.items()}
    arrays = {tag: v for tag, v in given.items() if not isinstance(v, str)}
    return names, arrays


class LoggingTensorHook(SessionRunHook):
    """Logs values every N iterations, every N seconds, and/or at the end
    (``tf.estimator.LoggingTensorHook``).

    Args:
      tensors: dict of tag to a fetch name (``'loss'``, ``'global_step'``) or an array
        computed in model_fn; or a list of names.
      every_n_iter: log every this many runs (loops when iterations_per_loop > 1).
      every_n_secs: log at most every this many seconds.
      at_end: log the last values in ``end()``.
      formatter: ``dict[tag, numpy value] -> str``; default ``"tag = value, ..."``.

    Raises:
      ValueError: none or both of every_n_iter/every_n_secs without at_end, or one <= 0.
    """

    def __init__(
        self,
        tensors: Tensors,
        every_n_iter: int | None = None,
        every_n_secs: float | None = None,
        at_end: bool = False,
        formatter: Callable[[dict[str, np.ndarray]], str] | None = None,
    ) -> None:
        only_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError(
                "LoggingTensorHook: give exactly one of every_n_iter and every_n_secs (or only at_end)."
            )
        if (every_n_iter is not None and every_n_iter <= 0) or (
            every_n_secs is not None and every_n_secs <= 0
        ):
            raise ValueError("LoggingTensorHook: every_n_iter and every_n_secs must be > 0.")
        self._names, self._arrays = _split_tensors(tensors)
        self._timer = None if only_end else SecondOrStepTimer(every_n_secs, every_n_iter)
        self._at_end, self._formatter = at_end, formatter
        self._iter = 0
        self._start = 0  # the global step at session creation
        self._trigger = False

    def step_tensors(self) -> dict[str, ArrayLike]:
        """The arrays among ``tensors`` (when built in model_fn)."""
        return dict(self._arrays)

    def begin(self) -> None:
        """Reset the iteration count and timer."""
        self._iter = 0
        if self._timer is not None:
            self._timer.reset()

    def after_create_session(self, session: Session, coord: object) -> None:
        """Note the global step iterations count from."""
        self._start = int(getattr(session, "global_step", 0) or 0)

    def next_required_step(self, global_step: int) -> int:
        """The step of the next iteration due (iteration i is global step start + i + 1
        when each run is one step); NEVER with every_n_secs or only at_end."""
        step = timer_step(self._timer, global_step - self._start - 1)
        return step if step == NEVER else step + self._start + 1

    def reads_state_after(self, step: int) -> bool:
        """False: it reads fetched values, never ``session.state``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Fetch the tensors when this run's (last) iteration is due."""
        last = self._iter + getattr(run_context, "iterations", 1) - 1
        self._trigger = self._timer is not None and self._timer.should_trigger_for_step(last)
        return SessionRunArgs(self._names) if self._trigger else None

    def _log_values(self, values: dict[str, np.ndarray], elapsed: float | None = None) -> None:
        if self._formatter is not None:
            _log.info(self._formatter(values))
            return
        text = ", ".join(f"{tag} = {values[tag]}" for tag in self._names)
        _log.info(f"{text} ({elapsed:.3f} sec)" if elapsed is not None else text)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Log when due, with the seconds since the last log."""
        iterations = getattr(run_context, "iterations", 1)
        if self._trigger:
            assert self._timer is not None  # _trigger is only set with a timer
            elapsed, _ = self._timer.update_last_triggered_step(self._iter + iterations - 1)
            self._log_values(run_values.results, elapsed)
        self._iter += iterations

    def end(self, session: Session) -> None:
        """Log the last values when ``at_end``."""
        if self._at_end:
            self._log_values(session.run(self._names))


class StopAtStepHook(SessionRunHook):
    """Requests a stop at a global step (``tf.estimator.StopAtStepHook``).

    Args:
      num_steps: steps to run from the global step at session creation.
      last_step: the global step to stop at.

    Raises:
      ValueError: both or neither given.
    """

    def __init__(self, num_steps: int | None = None, last_step: int | None = None) -> None:
        if (num_steps is None) == (last_step is None):
            raise ValueError("StopAtStepHook: give exactly one of num_steps and last_step.")
        self._num_steps, self._last_step = num_steps, last_step

    def last_step(self) -> int | None:
        """The step this hook stops at (known once the session exists): every loop ends
        there at the latest."""
        return self._last_step

    def reads_state_after(self, step: int) -> bool:
        """False: it reads the global step only."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """Whether ``step`` is at or past the last step (unknown before the session
        exists: True)."""
        return self._last_step is None or step >= self._last_step

    def after_create_session(self, session: Session, coord: object) -> None:
        """Fix ``last_step`` from the current global step when num_steps was given."""
        if self._num_steps is not None:
            self._last_step = int(session.global_step) + self._num_steps

    def next_required_step(self, global_step: int) -> int | None:
        """``last_step`` (every step until it is known, and once past it)."""
        if self._last_step is None or self._last_step <= global_step:
            return None
        return self._last_step

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Request a stop once the global step reaches ``last_step``."""
        if self._last_step is not None and int(run_values.results) >= self._last_step:
            run_context.request_stop()


class NanTensorHook(SessionRunHook):
    """Stops (or fails) on a NaN loss (``tf.estimator.NanTensorHook``).

    Args:
      loss_tensor: a fetch name (default ``'loss'``) or the loss array from model_fn.
      fail_on_nan_loss: raise NanLossDuringTrainingError (True) or log and request a stop.

    Raises:
      NanLossDuringTrainingError: from after_run, on NaN with fail_on_nan_loss.
    """

    def __init__(self, loss_tensor: str | ArrayLike = "loss", fail_on_nan_loss: bool = True) -> None:
        self._name = loss_tensor if isinstance(loss_tensor, str) else "nan_tensor_hook/loss"
        self._array = None if isinstance(loss_tensor, str) else loss_tensor
        self._fail = fail_on_nan_loss

    @property
    def fails(self) -> bool:
        """Whether a NaN raises (``fail_on_nan_loss``) rather than requesting a stop."""
        return self._fail

    def step_tensors(self) -> dict[str, ArrayLike]:
        """The loss array when built in model_fn."""
        return {} if self._array is None else {self._name: self._array}

    def next_required_step(self, global_step: int) -> int | None:
        """NEVER when failing on the loop's loss (a loop hands over every step's loss as
        ``'losses'``, so a NaN is reported at its exact step); else every step (a stop
        must come at the step of the NaN, and a model_fn array is read at a loop's last
        step only)."""
        return NEVER if self._fail and self._name == "loss" else None

    def reads_state_after(self, step: int) -> bool:
        """False: it reads the loss only."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """Only when it stops rather than fails on a NaN (an error ends training and
        discards the state anyway)."""
        return not self._fail

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the loss (every step's of the run, for ``'loss'``)."""
        return SessionRunArgs("losses" if self._name == "loss" else self._name)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Fail or stop on NaN."""
        values = np.asarray(run_values.results).reshape(-1)
        if np.isnan(values).any():
            if self._fail:
                session = getattr(run_context, "session", None)
                step = getattr(session, "global_step", None)
                if step is not None and self._name == "loss":  # the step of the first NaN
                    step = int(step) - len(values) + int(np.argmax(np.isnan(values)))
                raise NanLossDuringTrainingError(step if self._name == "loss" else None)
            _log.warning("NaN loss; stopping training.")
            run_context.request_stop()


class StepCounterHook(SessionRunHook):
    """Writes ``global_step/sec`` every N steps or seconds (``tf.estimator.StepCounterHook``).

    Args:
      every_n_steps: steps between measurements (100); every_n_secs: or seconds.
      output_dir: where the event file goes (TensorBoard); None only logs.
      summary_writer: accepted for compatibility; jaxspec writes with tensorboardX.

    Raises:
      ValueError: both or neither of every_n_steps/every_n_secs.
    """

    def __init__(
        self,
        every_n_steps: int | None = 100,
        every_n_secs: float | None = None,
        output_dir: str | None = None,
        summary_writer: object = None,
    ) -> None:
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("StepCounterHook: give exactly one of every_n_steps and every_n_secs.")
        self._timer = SecondOrStepTimer(every_n_secs, every_n_steps)
        self._output_dir = output_dir

    def begin(self) -> None:
        """Reset the timer."""
        self._timer.reset()

    def next_required_step(self, global_step: int) -> int:
        """The next measuring step (NEVER with every_n_secs)."""
        return timer_step(self._timer, global_step)

    def reads_state_after(self, step: int) -> bool:
        """False: it reads fetched values, never ``session.state``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Measure and write steps per second when due."""
        step = int(run_values.results)
        if not self._timer.should_trigger_for_step(step):
            return
        secs, steps = self._timer.update_last_triggered_step(step)
        if secs and steps is not None:
            rate = steps / secs
            _log.info("global_step/sec: %.4g", rate)
            if self._output_dir:
                write_scalars(self._output_dir, step, {"global_step/sec": rate})


class SummarySaverHook(SessionRunHook):
    """Writes scalar summaries every N steps or seconds (``tf.estimator.SummarySaverHook``).

    Args:
      save_steps / save_secs: exactly one.
      output_dir: the event file directory.
      summary_writer, scaffold: accepted for compatibility.
      summary_op: dict of tag to a fetch name or a scalar array from model_fn (JAX has no
        summary ops; this names what to write).

    Raises:
      ValueError: both or neither of save_steps/save_secs; no summary_op.
    """

    def __init__(
        self,
        save_steps: int | None = None,
        save_secs: float | None = None,
        output_dir: str | None = None,
        summary_writer: object = None,
        scaffold: object = None,
        summary_op: Tensors | None = None,
    ) -> None:
        if summary_op is None:
            raise ValueError("SummarySaverHook: summary_op (a dict of tag to value) is required.")
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._names, self._arrays = _split_tensors(summary_op)
        self._output_dir = output_dir
        self._trigger = False

    def step_tensors(self) -> dict[str, ArrayLike]:
        """The arrays among ``summary_op`` (when built in model_fn)."""
        return dict(self._arrays)

    def next_required_step(self, global_step: int) -> int:
        """The next step to write (NEVER with save_secs)."""
        return timer_step(self._timer, global_step)

    def reads_state_after(self, step: int) -> bool:
        """False: it reads fetched values, never ``session.state``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step and, when due, the summaries."""
        return SessionRunArgs({"global_step": "global_step", "values": self._names})

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Write the values when due."""
        step = int(run_values.results["global_step"])
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._output_dir:
                write_scalars(self._output_dir, step, run_values.results["values"])


class FinalOpsHook(SessionRunHook):
    """Reads values once at the end (``tf.estimator.FinalOpsHook``).

    Args:
      final_ops: a fetch name, a list of names, or a dict of tag to a name or an array
        from model_fn.
      final_ops_feed_dict: must be None (nothing to feed a compiled step).

    Raises:
      ValueError: a feed dict is given.
    """

    def __init__(self, final_ops: str | Tensors, final_ops_feed_dict: object = None) -> None:
        if final_ops_feed_dict:
            raise ValueError("FinalOpsHook: final_ops_feed_dict is not supported (nothing to feed).")
        self._single = isinstance(final_ops, str)
        self._names, self._arrays = _split_tensors([final_ops] if isinstance(final_ops, str) else final_ops)
        self._values: Any = None

    def step_tensors(self) -> dict[str, ArrayLike]:
        """The arrays among ``final_ops`` (when built in model_fn)."""
        return dict(self._arrays)

    def next_required_step(self, global_step: int) -> int:
        """NEVER: only ``end()`` reads."""
        return NEVER

    def reads_state_after(self, step: int) -> bool:
        """False: ``end()`` reads fetched values, never ``session.state``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    @property
    def final_ops_values(self) -> Any:
        """The values read in ``end()`` (same structure as final_ops)."""
        return self._values

    def end(self, session: Session) -> None:
        """Read the final values."""
        values = session.run(self._names)
        self._values = next(iter(values.values())) if self._single else values


class FeedFnHook(SessionRunHook):
    """``tf.estimator.FeedFnHook`` exists so ports import; a compiled JAX step has no
    feeds, so using it raises ValueError at ``begin()``.

    Args:
      feed_fn: the function TF would call for a feed dict.
    """

    def __init__(self, feed_fn: Callable[[], object]) -> None:
        self.feed_fn = feed_fn

    def next_required_step(self, global_step: int) -> int:
        """NEVER: it raises in ``begin()``."""
        return NEVER

    def reads_state_after(self, step: int) -> bool:
        """False: it raises in ``begin()``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it raises in ``begin()``."""
        return False

    def begin(self) -> None:
        """Raise: there is nothing to feed."""
        raise ValueError("FeedFnHook: a compiled JAX step has no feed_dict; feed data through input_fn.")
