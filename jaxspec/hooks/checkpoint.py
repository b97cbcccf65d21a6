"""CheckpointSaverHook and CheckpointSaverListener (tf.estimator's names)."""

from __future__ import annotations

import logging
from typing import Any

from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.loop.checkpoints import CheckpointStore
from jaxspec.spec.hooks import SessionRunArgs, SessionRunHook

_log = logging.getLogger("jaxspec")


class CheckpointSaverListener:
    """Called around each checkpoint save (``tf.estimator.CheckpointSaverListener``).

    ``session`` arguments are the HostSession (``session.state``, ``session.global_step``).
    ``after_save`` may return True to request that training stop.
    """

    def begin(self) -> None:
        """Called once before training."""

    def before_save(self, session: Any, global_step_value: int) -> None:
        """Called before a save at ``global_step_value``."""

    def after_save(self, session: Any, global_step_value: int) -> bool | None:
        """Called after a save started (Orbax may still be writing in the background)."""
        return None

    def end(self, session: Any, global_step_value: int) -> None:
        """Called once at the end of training."""


class CheckpointSaverHook(SessionRunHook):
    """Saves the state every N steps or seconds, and at the end
    (``tf.estimator.CheckpointSaverHook``).

    The state is the HostSession's (the JAX form of saving variables); checkpoints go to
    ``checkpoint_dir/checkpoints/<global_step>`` through Orbax (atomic, asynchronous).
    The Estimator adds one of these as a chief hook, as tf.estimator does.

    Args:
      checkpoint_dir: a model_dir-like directory.
      save_secs / save_steps: exactly one.
      saver, checkpoint_basename, scaffold, save_graph_def: accepted for compatibility.
      listeners: CheckpointSaverListeners.

    Raises:
      ValueError: both or neither of save_secs/save_steps.
    """

    def __init__(
        self,
        checkpoint_dir: str,
        save_secs: float | None = None,
        save_steps: int | None = None,
        saver: Any = None,
        checkpoint_basename: str = "model.ckpt",
        scaffold: Any = None,
        listeners: Any = None,
        save_graph_def: bool = True,
        store: CheckpointStore | None = None,
    ) -> None:
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._store = store or CheckpointStore(checkpoint_dir)
        self._listeners = list(listeners or ())
        self._last_saved: int | None = None
        self._stop = False

    def begin(self) -> None:
        """Start the listeners."""
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Count time and steps from here (TF saves at creation; the restored or initial
        state needs no new checkpoint here: it is either on disk or recreated)."""
        self._timer.update_last_triggered_step(int(session.global_step))
        self._last_saved = int(session.global_step)

    def before_run(self, run_context: Any) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Save when due."""
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()

    def end(self, session: Any) -> None:
        """Save the final step (if not saved yet), wait for it, then end the listeners."""
        step = int(session.global_step)
        if step != self._last_saved:
            self._save(session, step, final=True)
        self._store.wait()  # the final checkpoint is complete when training returns
        for listener in self._listeners:
            listener.end(session, step)

    def _save(self, session: Any, step: int, final: bool = False) -> bool:
        for listener in self._listeners:
            listener.before_save(session, step)
        if self._store.save(step, session.state, final=final):
            _log.info("Saving checkpoints for %d into %s.", step, self._store.directory)
        self._last_saved = step
        stop = False
        for listener in self._listeners:
            stop = bool(listener.after_save(session, step)) or stop
        return stop
