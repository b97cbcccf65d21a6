"""A preemption notice during training (SIGTERM, or any of ``RunConfig.preemption_signals``,
e.g. Slurm's SIGUSR1): stop at the next step that can be reached, save, then exit as
SIGTERM would."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from jaxspec.config.cluster import describe_process
from jaxspec.loop import watchdog
from jaxspec.loop.preemption_agreement import StopAgreement

_log = logging.getLogger("jaxspec")

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell reports for a process SIGTERM ended


def signal_name(signum: int) -> str:
    """``'SIGUSR1'`` for ``signal.SIGUSR1``; the number as text for an unnamed one."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class PreemptionWatcher:
    """While active, each of ``signals`` only sets ``triggered`` (and ``signum``); the
    training loop checks it at the next loop boundary (a plain Estimator's grouped loop
    also between the steps it reads and the scans it dispatches:
    ``jaxspec.loop.dispatch_bound``), ends the hooks (the final checkpoint is written and
    awaited), then calls ``exit_if_triggered``. Active only in the main thread (Python
    delivers signals there); a signal the program ignores stays ignored, and a signal not
    listed keeps its own disposition. The previous handlers are restored when the block
    ends, or, when it ends after a stop, by ``exit_if_triggered``. A second listed signal
    before that boundary (an input_fn that blocks, say) ends the process at once, as the
    signal would have without the watcher, with no new checkpoint; once the loop has
    stopped (``reached_last_boundary``), further signals are ignored so the final
    checkpoint is written whole; once the block has ended after a stop (that checkpoint
    is complete), a further one exits with status 143 at once (``SystemExit``), not by
    the signal's own action.

    In a multi-process run a signal to some processes only (a scheduler that signals one
    host first) stops all of them together: the loop asks ``stop_here`` at every
    boundary, where every process publishes whether it was signalled and all stop at
    the first boundary where any was (``jaxspec.loop.preemption_agreement``); all save
    that step's checkpoint and all exit with status 143, the processes not signalled too
    (they were preempted with their peer). A one-process run exchanges nothing.

    Follows tf.estimator's TPU/NPU preemption handling (checkpoint, then exit) for SIGTERM;
    other signals are a JAX addition (``RunConfig.preemption_signals``).

    Args:
      progress: ``() -> int``, the global step training has surely reached on the
        devices; read when the signal comes, to log how many steps ran after it. The
        loop may replace it (``progress`` attribute) with a closer one.
      signals: the signal numbers that mean "preempted" (default ``(signal.SIGTERM,)``).
    """

    def __init__(
        self, progress: Callable[[], int] | None = None, signals: Sequence[int] = (signal.SIGTERM,)
    ) -> None:
        self.triggered = False
        self.signum: int | None = None
        self.progress = progress
        self.step_at_signal: int | None = None
        self.stopping = False  # the loop reached its last boundary: the final save runs
        self.stopped_with: tuple[int, str] | None = None  # (process, signal) a peer's signal stopped us
        self._agreement: StopAgreement | None = None  # several processes: the stop is agreed
        self._signals = tuple(dict.fromkeys(int(s) for s in signals))
        self._previous: dict[int, Any] = {}  # each signal taken over -> its handler before
        self._installed = False
        self._saved = False  # the block ended after a stop: the stop's checkpoint is complete

    def _handle(self, signum: int, frame: Any) -> None:
        if self._saved:
            self._exit_now(signum, frame)
            return
        if (self.triggered or self.signum is not None) and self.stopping:
            _log.warning(
                "%s received again while the stop's checkpoint is being written: ignored.",
                signal_name(signum),
            )
            return
        if self.signum is not None:
            self._end_now(signum, frame)
            return
        self.step_at_signal = None if self.progress is None else int(self.progress())
        self.signum = signum
        if self._agreement is None or self.triggered:  # one process, or a stop already agreed
            _log.warning(
                "%s received: stopping at the next step that can be reached, saving, then exiting.",
                signal_name(signum),
            )
            self.triggered = True
        elif self.stopping:  # after the last boundary: nothing is left to agree on
            _log.warning(
                "%s received after training's last step, while its checkpoint is written.",
                signal_name(signum),
            )
        else:  # the stop waits for the next boundary, where all processes agree on it
            _log.warning(
                "%s received: all processes stop at the next loop boundary, save, then exit.",
                signal_name(signum),
            )

    def _exit_now(self, signum: int, frame: Any) -> None:
        """A listed signal after the block ended with a stop (the stop's checkpoint is
        complete; the train call is tidying up): exit with status 143 at once, or hand the
        signal to the program's own handler of it."""
        self._restore()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
            return
        _log.warning(
            "%s received again after the stop's checkpoint was saved: exiting now with status %d.",
            signal_name(signum),
            EXIT_STATUS,
        )
        raise SystemExit(EXIT_STATUS)

    def _end_now(self, signum: int, frame: Any) -> None:
        """A second listed signal before training reached a step it can stop at (an
        input_fn that blocks, a hung collective): give the signal its previous
        disposition and deliver it again, so the process ends as it would have without
        the watcher (a program's own handler is called instead). No new checkpoint is
        written; the last complete one is intact."""
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):  # the program's own handler decides, as without the watcher
            _log.warning(
                "%s received again before training reached a step it can stop at: handing it to "
                "the program's own handler.",
                signal_name(signum),
            )
            previous(signum, frame)
            return
        _log.error(
            "%s received again before training reached a step it can stop at: ending now, "
            "without a new checkpoint (the last complete one is intact).",
            signal_name(signum),
        )
        for handler in logging.getLogger().handlers + _log.handlers:
            handler.flush()
        signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        os.kill(os.getpid(), signum)

    def _went_on_with_peers(self, global_step: int) -> None:
        """A signal to this process of several after training's last agreed boundary (the
        final checkpoint is complete): no peer stops with it, so ending alone would leave
        them waiting in the collectives the program runs after ``train`` (a variable read,
        an evaluation, an export), and this process in JAX's shutdown barrier. It goes on
        with them instead; the program's own handler of the signal is called if it had
        one."""
        _log.warning(
            "%s received after training's last step (global step %d; checkpoint saved). The "
            "other processes were not signalled: this one goes on with them rather than end "
            "alone, which would leave their collectives waiting. Signal every process to end them all.",
            signal_name(self.signum or 0),
            global_step,
        )
        previous = self._previous.get(self.signum or 0)
        if callable(previous):
            previous(self.signum, None)

    def stop_here(self, global_step: int) -> bool:
        """Called by the loop at every loop boundary (``global_step`` reached): whether
        training stops here for a preemption signal. One process: whether one came.
        Several: one agreement round (``StopAgreement.round``; every process calls this
        at the same boundaries) that returns True on every process at the first
        boundary where any of them had been signalled.

        Raises:
          RuntimeError: the processes reached different global steps (see
            ``StopAgreement.round``).
        """
        if self._agreement is None or self.triggered:
            return self.triggered
        stage = watchdog.current.at, watchdog.current.detail
        watchdog.mark(watchdog.COLLECTIVE, "the preemption agreement")
        first = self._agreement.round(global_step, None if self.signum is None else signal_name(self.signum))
        watchdog.mark(*stage)
        if first is None:
            return False
        self.triggered = True
        if self.signum is None:
            self.stopped_with = first
            _log.warning(
                "%s received %s: all processes stop at global step %d, save, then exit.",
                describe_process(first[0]),
                first[1],
                global_step,
            )
        return True

    def reached_last_boundary(self) -> None:
        """The loop stopped at a step boundary and the final checkpoint is about to be
        written: a further listed signal is logged and ignored until the watcher exits."""
        self.stopping = True

    def __enter__(self) -> PreemptionWatcher:
        self._agreement = StopAgreement.join()  # every process takes part, main thread or not
        if threading.current_thread() is threading.main_thread():
            for signum in self._signals:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # an ignored signal stays ignored
                    self._previous[signum] = signal.signal(signum, self._handle)
            self._installed = True
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is None and (self.triggered or self.signum is not None):
            self._saved = True  # handlers stay until exit_if_triggered: a further signal exits 143 now
            return
        self._restore()

    def _restore(self) -> None:
        """Give every signal taken over its previous disposition back."""
        if self._installed:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._installed = False

    def exit_if_triggered(self, global_step: int) -> None:
        """After a preemption signal (the checkpoint of ``global_step`` is on disk): log
        which signal came and how many steps ran after it, then hand the signal to the
        program's own handler of it when it had one, else raise ``SystemExit(143)``, the
        status of a process ended by SIGTERM (whichever signal came), so a scheduler does
        not read a preempted run as a finished one.

        A process of a multi-process run that was not signalled itself, stopped with a
        signalled peer (``stop_here``), logs which process received which signal and
        raises ``SystemExit(143)``. A signal that came to one process after the last
        boundary was agreed (training had reached its end; the checkpoint is complete) does
        not end it alone: it logs a WARNING and returns, as its peers do, so the collectives
        the program runs after ``train`` do not wait for it forever.

        Raises:
          SystemExit: status 143, when no handler of the program's own took the signal.
        """
        self._restore()  # kept after a stop until now (``__exit__``)
        if self.signum is None and self.stopped_with is not None:
            _log.warning(
                "Training stopped at global step %d with %s, which received %s; checkpoint saved.",
                global_step,
                describe_process(self.stopped_with[0]),
                self.stopped_with[1],
            )
            raise SystemExit(EXIT_STATUS)
        if self.signum is None:
            return
        if self._agreement is not None and not self.triggered:
            self._went_on_with_peers(global_step)
            return
        after = None if self.step_at_signal is None else max(0, global_step - self.step_at_signal)
        _log.warning(
            "Training stopped by %s at global step %d; checkpoint saved. Steps run after the "
            "signal: %s (at most: the steps already on the devices when it came).",
            signal_name(self.signum),
            global_step,
            "unknown" if after is None else after,
        )
        previous = self._previous.get(self.signum)
        if callable(previous):
            previous(self.signum, None)  # the program's handler decides
            return
        raise SystemExit(EXIT_STATUS)
