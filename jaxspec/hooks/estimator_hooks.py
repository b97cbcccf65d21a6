"""The hooks an Estimator adds to its own train call, as tf.estimator does: its default
training output (``ProgressHook``) and, when the call has none, a CheckpointSaverHook."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from jaxspec.hooks.checkpoint import CheckpointSaverHook, CheckpointSaverListener, estimator_saver
from jaxspec.spec.hooks import NEVER, SessionRunHook
from jaxspec.store.checkpoints import CheckpointStore
from jaxspec.store.summaries import write_scalars


class ProgressHook(SessionRunHook):
    """tf.estimator's default training output: ``loss = ..., step = ...`` and
    ``global_step/sec`` log lines every ``log_step_count_steps``, and the loss of every
    step that is a multiple of ``save_summary_steps`` (plus ``global_step/sec`` and, for
    TPUEstimator, ``examples/sec``) in model_dir's event file. ``log_step_count_steps``
    None or 0 turns the log lines off.

    Args:
      model_dir: where the event file goes.
      summary_every: RunConfig's ``save_summary_steps`` (steps; None or 0: none).
      log_every: RunConfig's ``log_step_count_steps`` (steps; None or 0: no lines).
      examples_per_step: the global batch size for ``examples/sec``, or None.
      line: ``line(msg, *args, cadence=True)``, how a periodic log line is printed (the
        loop's console).

    The loop hands it each loop's per-step losses (``after_loop``); it reads neither the
    state nor stops training.
    """

    def __init__(
        self,
        model_dir: str,
        summary_every: int | None,
        log_every: int | None,
        examples_per_step: int | None,
        line: Callable[..., None],
    ) -> None:
        self.model_dir, self.summary_every, self.log_every = model_dir, summary_every or 0, log_every or 0
        self.examples_per_step = examples_per_step
        self.losses = np.zeros(0)
        self._line = line

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Start timing at the current global step."""
        self.last_step, self.last_time = int(session.global_step), time.time()

    def next_required_step(self, global_step: int) -> int:
        """The next multiple of ``log_step_count_steps`` (NEVER when logging is off):
        summaries need no step, they are written from every step's loss of a loop."""
        if not self.log_every:
            return NEVER
        return (global_step // self.log_every + 1) * self.log_every

    def reads_state_after(self, step: int) -> bool:
        """False: it reads the losses the loop hands it."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def after_loop(self, first_step: int, losses: np.ndarray, loss_scales: np.ndarray | None = None) -> None:
        """Record a loop's per-step losses (``[steps]``, all of them, not only the last)
        for the loop that started after global step ``first_step``, and the state's loss
        scale after each step (``[steps]``) when it holds one (``loss_scale``)."""
        self.losses = losses
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
        self._line("loss = %.6g, step = %d (%.3f sec)", losses[-1], step, elapsed, cadence=True)
        self._line("global_step/sec: %.4g", rate, cadence=True)
        scalars = {"global_step/sec": rate}
        if self.examples_per_step:
            scalars["examples/sec"] = rate * self.examples_per_step
        write_scalars(self.model_dir, step, scalars)
        self.last_step, self.last_time = step, time.time()


class EstimatorHooks(NamedTuple):
    """The Estimator's own hooks of a train call: ``progress`` (a ProgressHook, fed by
    the loop) and ``all``, every one of them in the order they run (after the user's
    and the spec's hooks: progress, then the Estimator's saver when it adds one)."""

    progress: ProgressHook
    all: list[SessionRunHook]


def estimator_hooks(
    hooks: list[Any],
    config: Any,
    model_dir: str,
    listeners: list[CheckpointSaverListener],
    store: CheckpointStore,
    extras: Callable[[int], Mapping[str, bytes]] | None,
    examples_per_step: int | None,
    line: Callable[..., None],
) -> EstimatorHooks:
    """The hooks ``Estimator.train`` adds, as tf.estimator does.

    Args:
      hooks: the call's other hooks (the user's and the spec's).
      config: the RunConfig (``save_summary_steps``, ``log_step_count_steps``,
        ``save_checkpoints_steps``/``_secs``).
      model_dir: the Estimator's model_dir.
      listeners: ``train(saving_listeners=)``, checked by ``check_saving_listeners``.
      store: the CheckpointStore the saver writes to.
      extras: ``global_step -> {file name: bytes}`` saved with each checkpoint (the
        input position), or None.
      examples_per_step: the global batch size (``examples/sec``), or None.
      line: how the progress lines are printed.

    Raises:
      ValueError: as ``estimator_saver`` (listeners next to a CheckpointSaverHook of the
        call's own).
    """
    progress = ProgressHook(
        model_dir, config.save_summary_steps, config.log_step_count_steps, examples_per_step, line
    )
    saver: CheckpointSaverHook | None = estimator_saver(hooks, model_dir, config, listeners, store, extras)
    return EstimatorHooks(progress, [progress] if saver is None else [progress, saver])
