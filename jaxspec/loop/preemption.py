"""SIGTERM during training: finish the current loop, save, and exit cleanly."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

_log = logging.getLogger("jaxspec")


class PreemptionWatcher:
    """While active, a SIGTERM only sets ``triggered``; the training loop checks it at the
    next loop boundary, saves a checkpoint and exits with status 0. Active only in the
    main thread (Python delivers signals there); the previous handler is restored after.
    """

    def __init__(self) -> None:
        self.triggered = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        _log.warning("SIGTERM received: saving a checkpoint at the next step boundary, then exiting.")
        self.triggered = True

    def __enter__(self) -> PreemptionWatcher:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
