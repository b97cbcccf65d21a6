"""SIGTERM during training: stop at the next step that can be reached, save, then exit
as SIGTERM would."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("jaxspec")

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell reports for a process SIGTERM ended


class PreemptionWatcher:
    """While active, a SIGTERM only sets ``triggered``; the training loop checks it at the
    next loop boundary (a plain Estimator's grouped loop also between the steps it reads
    and the scans it dispatches: ``jaxspec.loop.dispatch_bound``), ends the hooks (the
    final checkpoint is written and awaited), then calls ``exit_if_triggered``. Active
    only in the main thread (Python delivers signals there) and only when SIGTERM is not
    ignored; the previous handler is restored after.

    Args:
      progress: ``() -> int``, the global step training has surely reached on the
        devices; read when the signal comes, to log how many steps ran after it. The
        loop may replace it (``progress`` attribute) with a closer one.
    """

    def __init__(self, progress: Callable[[], int] | None = None) -> None:
        self.triggered = False
        self.progress = progress
        self.step_at_signal: int | None = None
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.triggered:
            return
        self.step_at_signal = None if self.progress is None else int(self.progress())
        _log.warning("SIGTERM received: stopping at the next step that can be reached, saving, then exiting.")
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
        """After a SIGTERM (the checkpoint of ``global_step`` is on disk): log how many
        steps ran after the signal, then hand the signal to the program's own SIGTERM
        handler when it had one, else raise ``SystemExit(143)``, the status of a process
        ended by SIGTERM, so a scheduler does not read a preempted run as a finished one.

        Raises:
          SystemExit: status 143, when no handler of the program's own took the signal.
        """
        if not self.triggered:
            return
        after = None if self.step_at_signal is None else max(0, global_step - self.step_at_signal)
        _log.warning(
            "Training stopped by SIGTERM at global step %d; checkpoint saved. Steps run after the "
            "signal: %s (at most: the steps already on the devices when it came).",
            global_step,
            "unknown" if after is None else after,
        )
        if callable(self._previous):
            self._previous(signal.SIGTERM, None)  # the program's handler decides
            return
        raise SystemExit(EXIT_STATUS)
