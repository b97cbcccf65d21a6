"""The training loop: loops of iterations_per_loop steps, hooks, summaries, checkpoints."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from jaxspec.loop.hook_runner import HookRunner
from jaxspec.loop.phase import Phase
from jaxspec.loop.summaries import write_scalars

_log = logging.getLogger("jaxspec")


class NanLossDuringTrainingError(RuntimeError):
    """Raised when a training step's loss is NaN (``tf.compat.v1.train.NanLossDuringTrainingError``).

    The state of the loop that produced it is dropped, so the last checkpoint in
    model_dir is the last good one.
    """

    def __str__(self) -> str:
        return "NaN loss during training."


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


class _Progress:
    """tf.estimator's log lines (loss, step, global_step/sec) and TensorBoard scalars."""

    def __init__(self, phase: Phase, start_step: int) -> None:
        self.phase = phase
        cfg = phase.est.config
        self.summary_every = cfg.save_summary_steps or 0
        self.log_every = cfg.log_step_count_steps or 0
        self.last_log_step, self.last_log_time = start_step, time.time()
        self.examples_per_step = phase.global_batch_size

    def after_loop(self, first_step: int, losses: np.ndarray) -> None:
        step = first_step + len(losses)
        if self.summary_every:
            for i, loss in enumerate(losses):
                s = first_step + i + 1
                if s % self.summary_every == 0:
                    write_scalars(self.phase.est.model_dir, s, {"loss": loss})
        if self.log_every and step // self.log_every > self.last_log_step // self.log_every:
            elapsed = max(time.time() - self.last_log_time, 1e-9)
            rate = (step - self.last_log_step) / elapsed
            _log.info("loss = %.6g, step = %d (%.3f sec)", losses[-1], step, elapsed)
            _log.info("global_step/sec: %.4g", rate)
            scalars = {"global_step/sec": rate}
            if self.examples_per_step:
                scalars["examples/sec"] = rate * self.examples_per_step
            write_scalars(self.phase.est.model_dir, step, scalars)
            self.last_log_step, self.last_log_time = step, time.time()


class _Saver:
    """When to save: every save_checkpoints_steps / _secs, and at the end."""

    def __init__(self, phase: Phase, listeners: list[Any], start_step: int) -> None:
        cfg = phase.est.config
        self.phase, self.listeners = phase, listeners
        self.every_steps, self.every_secs = cfg.save_checkpoints_steps, cfg.save_checkpoints_secs
        self.last_step, self.last_time = start_step, time.time()

    def maybe_save(self, step: int, state: Any, force: bool = False) -> None:
        due = force or (
            (self.every_steps and step // self.every_steps > self.last_step // self.every_steps)
            or (self.every_secs and time.time() - self.last_time >= self.every_secs)
        )
        if not due or step == self.last_step and not force:
            return
        for listener in self.listeners:
            listener.before_save(None, step)
        if self.phase.store.save(step, state):
            _log.info("Saving checkpoints for %d into %s.", step, self.phase.store.directory)
        for listener in self.listeners:
            listener.after_save(None, step)
        self.last_step, self.last_time = step, time.time()


def run_train(est: Any, input_fn: Any, hooks: Any, steps: Any, max_steps: Any, saving_listeners: Any) -> None:
    """Body of ``Estimator.train``; see there."""
    check_steps(steps, max_steps)
    phase = Phase(est, "train")
    latest = phase.store.latest_step()
    if max_steps is not None and latest is not None and latest >= max_steps:
        _log.info("Skipping training: global step %d already reached max_steps=%d.", latest, max_steps)
        return
    if not phase.start(input_fn):
        _log.info("input_fn gave no data; nothing to train.")
        return
    session = phase.session
    start = session.global_step
    last_step = max_steps if max_steps is not None else (start + steps if steps is not None else None)
    runner = HookRunner(list(hooks or ()) + list(session.parts.hooks) + phase.chief_hooks())
    runner.begin()
    session.create_state()
    runner.after_create_session()
    listeners = list(saving_listeners or ())
    for listener in listeners:
        listener.begin()
    progress, saver = _Progress(phase, start), _Saver(phase, listeners, start)
    final_loss = None
    try:
        while last_step is None or session.global_step < last_step:
            n = phase.iterations_per_loop
            if last_step is not None:
                n = min(n, last_step - session.global_step)
            group = phase.next_group(n)
            if group is None:
                break
            args, _, n = group
            runner.before_run()
            state, _, losses, host = session.run(*args)
            losses = np.asarray(losses).mean(axis=1)
            if np.isnan(losses).any():
                raise NanLossDuringTrainingError()
            first = session.global_step
            session.state, session.global_step = state, first + n
            phase.call_host_fns(host, n)
            progress.after_loop(first, losses)
            stop = runner.after_run({"loss": losses[-1], "global_step": session.global_step})
            saver.maybe_save(session.global_step, session.state)
            if stop:
                break
            final_loss = losses[-1]
        saver.maybe_save(session.global_step, session.state, force=True)
        runner.end()
        for listener in listeners:
            listener.end(None, session.global_step)
        _log.info("Loss for final step: %s.", final_loss)
    finally:
        phase.store.wait()
