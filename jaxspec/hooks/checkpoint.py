"""CheckpointSaverHook and CheckpointSaverListener (tf.estimator's names)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from jaxspec.config.run_config import RunConfig
from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.spec.hooks import (
    NEVER,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from jaxspec.store import summaries
from jaxspec.store.checkpoints import CheckpointStore, SavedCheckpoint
from jaxspec.store.local_tier import LocalTier

_log = logging.getLogger("jaxspec")


class CheckpointSaverListener:
    """Called around each checkpoint save (``tf.estimator.CheckpointSaverListener``).

    ``session`` arguments are the Session (``session.state``, ``session.global_step``).
    ``after_save`` may return True to request that training stop.
    """

    def begin(self) -> None:
        """Called once before training."""

    def before_save(self, session: Session, global_step_value: int) -> None:
        """Called before a save at ``global_step_value``."""

    def after_save(self, session: Session, global_step_value: int) -> bool | None:
        """Called after a save started (Orbax may still be writing in the background)."""
        return None

    def end(self, session: Session, global_step_value: int) -> None:
        """Called once at the end of training."""


class CheckpointSaverHook(SessionRunHook):
    """Saves the state every N steps or seconds, and at the end
    (``tf.estimator.CheckpointSaverHook``).

    The state is the Session's (the JAX form of saving variables); checkpoints go to
    ``checkpoint_dir/checkpoints/<global_step>`` through Orbax (atomic, asynchronous).
    The Estimator adds one of these as a chief hook, as tf.estimator does.

    Args:
      checkpoint_dir: a model_dir-like directory.
      save_secs / save_steps: exactly one.
      saver, checkpoint_basename, scaffold, save_graph_def: accepted for compatibility.
      listeners: CheckpointSaverListeners.
      store: the CheckpointStore to save into (jaxspec's; default: one for
        ``checkpoint_dir``).
      extras: ``global_step -> {file name: bytes}``, extra files saved in each checkpoint
        (jaxspec's; the train loop passes the input position), or None.

    Raises:
      ValueError: both or neither of save_secs/save_steps.
    """

    def __init__(
        self,
        checkpoint_dir: str,
        save_secs: float | None = None,
        save_steps: int | None = None,
        saver: object = None,
        checkpoint_basename: str = "model.ckpt",
        scaffold: object = None,
        listeners: Iterable[CheckpointSaverListener] | None = None,
        save_graph_def: bool = True,
        store: CheckpointStore | None = None,
        extras: Callable[[int], Mapping[str, bytes]] | None = None,
    ) -> None:
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._store = store or CheckpointStore(checkpoint_dir)
        self._listeners = list(listeners or ())
        self._extras = extras
        self._saved_step: int | None = None

    def begin(self) -> None:
        """Start the listeners."""
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session: Session, coord: object) -> None:
        """Save the state training starts from, as TF does ("Saving checkpoints for 0
        into ..." on a fresh start), so an early failure leaves a checkpoint; a resumed
        step is on disk already and not written again. Listeners are called either way,
        as in TF. Count time and steps from here."""
        step = int(session.global_step)
        self._timer.update_last_triggered_step(step)
        saved, _ = self._save(session, step, with_extras=False)  # no batch trained: no input position
        if saved is not None:
            # Written before the first loop runs: the host copy Orbax writes from is freed
            # before training allocates, so host memory peaks as with one save.
            self._store.wait()

    def due_at(self, step: int) -> bool:
        """Whether a save is due at global step ``step`` (seconds counted up to now)."""
        return self._timer.should_trigger_for_step(step)

    def next_required_step(self, global_step: int) -> int:
        """The next saving step; NEVER with save_secs (time is checked at the end of
        every loop, so a save comes at most one loop after its time)."""
        step = self._timer.next_trigger_step(global_step)
        return NEVER if step is None else step

    def reads_state_after(self, step: int) -> bool:
        """Whether a save is due at ``step`` (seconds counted up to now). A seconds
        trigger that elapses after the loop asked is honoured one loop later: a save
        is deferred while ``session.state`` is None (given to the loop ahead)."""
        return self.due_at(step)

    def may_stop_after(self, step: int) -> bool:
        """Whether a listener's ``after_save`` may stop training at ``step``: a save is
        due there and there are listeners (without any, it never stops)."""
        return bool(self._listeners) and self.due_at(step)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Save when due."""
        step, session = int(run_values.results), run_context.session
        assert session is not None  # the loop always passes its session
        if session.state is None:
            return  # this loop's state went to the loop dispatched ahead: save after the next
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._save(session, step)[1]:
                run_context.request_stop()

    def end(self, session: Session) -> None:
        """Save the final step (if not saved yet), wait for it, then end the listeners."""
        step = int(session.global_step)
        if step != self._saved_step:
            self._save(session, step)
        self._store.wait()  # the final checkpoint is complete when training returns
        for listener in self._listeners:
            listener.end(session, step)

    def _save(
        self, session: Session, step: int, with_extras: bool = True
    ) -> tuple[SavedCheckpoint | None, bool]:
        """Save ``step``: the save's record (None when none started) and whether a
        listener's ``after_save`` asked to stop."""
        for listener in self._listeners:
            listener.before_save(session, step)
        extras = self._extras(step) if self._extras is not None and with_extras else None
        saved = self._store.save(step, session.state, extras=extras)
        summaries.flush_all()  # a kill after this checkpoint loses none of the summaries before it
        if saved is not None:
            _log.info("Saving checkpoints for %d into %s.", step, self._store.directory)
        self._saved_step = step
        stop = False
        for listener in self._listeners:
            stop = bool(listener.after_save(session, step)) or stop
        return saved, stop


class LocalCheckpointHook(SessionRunHook):
    """Saves the state to the node-local tier every ``local_save_checkpoints_steps``
    global steps (jaxspec's; no tf.estimator counterpart): see
    ``jaxspec.store.local_tier``. The Estimator adds it to ``train`` when RunConfig sets
    ``local_checkpoint_dir``, next to its CheckpointSaverHook, whose model_dir saves it
    leaves as they are. Those steps are steps it needs, so a plain Estimator's grouped
    loops end there.

    Args:
      tier: the LocalTier to save into.
      extras: ``global_step -> {file name: bytes}``, extra files of each checkpoint (the
        input position), or None.
    """

    def __init__(self, tier: LocalTier, extras: Callable[[int], Mapping[str, bytes]] | None = None) -> None:
        self._tier = tier
        self._extras = extras

    def next_required_step(self, global_step: int) -> int:
        """The next multiple of ``local_save_checkpoints_steps``."""
        return int(self._tier.next_step(global_step))

    def reads_state_after(self, step: int) -> bool:
        """Whether a local save is due at ``step``."""
        return bool(self._tier.due_at(step))

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Save locally when due (Orbax writes in the background)."""
        step = int(run_values.results)
        session = run_context.session
        assert session is not None  # the loop always passes its session
        state = session.state
        if state is None or not self._tier.due_at(step):
            return  # None: given to a loop ahead, which no due step allows
        extras = self._extras(step) if self._extras is not None else None
        if self._tier.save(step, state, extras=extras):
            _log.debug("Saving a local checkpoint for %d into %s.", step, self._tier.directory)


def check_saving_listeners(
    saving_listeners: Iterable[CheckpointSaverListener] | None, config: RunConfig
) -> list[CheckpointSaverListener]:
    """tf.estimator's rules for ``train(saving_listeners=)``: the listeners as a list.

    Raises:
      TypeError: an entry is not a CheckpointSaverListener.
      ValueError: listeners given while checkpoint saving is off (both of RunConfig's
        ``save_checkpoints_steps`` and ``save_checkpoints_secs`` None).
    """
    listeners = list(saving_listeners or ())
    for listener in listeners:
        if not isinstance(listener, CheckpointSaverListener):
            raise TypeError(
                f"saving_listeners must hold CheckpointSaverListeners, got {type(listener).__name__}."
            )
    if listeners and not config.save_checkpoints_steps and not config.save_checkpoints_secs:
        raise ValueError("saving_listeners need checkpoint saving on (save_checkpoints_steps or _secs).")
    return listeners


def estimator_saver(
    hooks: list[SessionRunHook],
    model_dir: str,
    config: RunConfig,
    listeners: list[CheckpointSaverListener],
    store: CheckpointStore,
    extras: Callable[[int], Mapping[str, bytes]] | None,
) -> CheckpointSaverHook | None:
    """The Estimator's own CheckpointSaverHook, as tf.estimator adds one: only when
    none is among ``hooks`` (the user's and the spec's); it saves every RunConfig
    ``save_checkpoints_steps`` steps or ``save_checkpoints_secs`` seconds, and the final
    step (with neither set, only the step training starts from and the final one).

    Raises:
      ValueError: ``listeners`` given while ``hooks`` hold a CheckpointSaverHook.
    """
    if any(isinstance(h, CheckpointSaverHook) for h in hooks):
        if listeners:
            raise ValueError(
                "saving_listeners need the Estimator's own CheckpointSaverHook; pass them to yours."
            )
        return None
    steps, secs = config.save_checkpoints_steps, config.save_checkpoints_secs
    if not steps and not secs:
        secs = float("inf")  # no periodic saves; the final step is still saved in end()
    return CheckpointSaverHook(
        model_dir,
        save_secs=secs or None,
        save_steps=steps or None,
        listeners=listeners,
        store=store,
        extras=extras,
    )
