"""SIGTERM during training: finish the current loop, save, then exit as SIGTERM would."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

_log = logging.getLogger("jaxspec")

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell reports for a process SIGTERM ended


class PreemptionWatcher:
    """While active, a SIGTERM only sets ``triggered``; the training loop checks it at the
    next loop boundary, ends the hooks (the final checkpoint is written and awaited), then
    calls ``exit_if_triggered``. Active only in the main thread (Python delivers signals
    there) and only when SIGTERM is not ignored; the previous handler is restored after.
    """

    def __init__(self) -> None:
        self.triggered = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        _log.warning("SIGTERM received: saving a checkpoint at the next step boundary, then exiting.")
        self.triggered = True

    def __enter__(self) -> PreemptionWatcher:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGTERM)
            if previous is not signal.SIG_IGN:  # an ignored SIGTERM stays ignored
                self._previous = signal.signal(signal.SIGTERM, self._handle)
                self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def exit_if_triggered(self, global_step: int) -> None:
        """After a SIGTERM (the checkpoint of ``global_step`` is on disk): hand the signal
        to the program's own SIGTERM handler when it had one, else raise
        ``SystemExit(143)``, the status of a process ended by SIGTERM, so a scheduler does
        not read a preempted run as a finished one.

        Raises:
          SystemExit: status 143, when no handler of the program's own took the signal.
        """
        if not self.triggered:
            return
        _log.warning("Training stopped by SIGTERM at global step %d; checkpoint saved.", global_step)
        if callable(self._previous):
            self._previous(signal.SIGTERM, None)  # the program's handler decides
            return
        raise SystemExit(EXIT_STATUS)
