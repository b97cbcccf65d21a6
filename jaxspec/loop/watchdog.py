"""The hang watchdog (``RunConfig.hang_timeout_secs``): when no training step ends within
the bound, one ERROR names where the loop waits, every thread's stack goes to stderr, and
with ``exit_on_hang`` the process exits with status 124 so a scheduler restarts it.

The drivers mark where they are as they go (``mark``: two attribute writes, no lock):
reading input_fn, waiting for the device or a collective across processes, running a
hook, waiting for a checkpoint save. The watchdog's thread only reads those marks.
"""

from __future__ import annotations

import faulthandler
import logging
import sys
import threading
import time
from typing import Any

from jaxspec.loop.peer_watch import flush_and_exit

_log = logging.getLogger("jaxspec")

EXIT_STATUS = 124  # timeout(1)'s status for a command that ran past its limit

INPUT = "input_fn"
DEVICE = "the device"
COLLECTIVE = "a collective across processes (a peer may be slow or stuck)"
HOOK = "a hook"
SAVE = "a checkpoint save"


class Stage:
    """Where the training loop is now (``at``, one of this module's stage names, and a
    ``detail`` such as the hook and method), and when its latest step ended (``ended``,
    ``time.monotonic()`` seconds; None until the first loop, compile included, ended)."""

    __slots__ = ("at", "detail", "ended", "step")

    def __init__(self) -> None:
        self.at, self.detail = "starting", ""
        self.ended: float | None = None
        self.step = 0


current = Stage()  # the process's training loop (train calls run one at a time per process)


def mark(at: str, detail: str = "") -> None:
    """The loop now waits in ``at`` (``detail``: which hook, say)."""
    current.at, current.detail = at, detail


def step_ended(global_step: int) -> None:
    """A loop's steps ended (their results are on the host): the hang clock restarts."""
    current.ended, current.step = time.monotonic(), global_step


def _dump_stacks() -> None:
    """Every thread's Python stack to stderr (faulthandler needs a real file descriptor:
    the interpreter's own stderr when sys.stderr has none, as under pytest's capture)."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:
            continue
        try:
            stream.flush()
            faulthandler.dump_traceback(file=stream, all_threads=True)
            return
        except (AttributeError, ValueError, OSError):  # no fileno(): try the next
            continue


class HangWatchdog:
    """While active with a ``timeout_secs``, a thread checks (every ``timeout_secs / 8``,
    at most 1 s) whether a step ended within the last ``timeout_secs`` seconds, counted
    from the end of the first loop (whose compile does not count). If not: one ERROR
    (the seconds waited, the last global step, the stage the loop waits in), every
    thread's stack on stderr, once per hang (a step ending re-arms it), then, with
    ``exit_on_hang``, exit with status 124 (``os._exit``: the main thread is stuck).

    A JAX addition: tf.estimator has no watchdog.

    Args:
      timeout_secs: seconds, or None (the watchdog does nothing).
      exit_on_hang: exit with status 124 after the report.
    """

    def __init__(self, timeout_secs: float | None, exit_on_hang: bool = False) -> None:
        self.timeout_secs = timeout_secs
        self.exit_on_hang = exit_on_hang
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> HangWatchdog:
        if self.timeout_secs is None:
            return self
        current.at, current.detail, current.ended = "starting", "", None
        self._thread = threading.Thread(target=self._watch, name="jaxspec-hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            current.ended = None

    def _watch(self) -> None:
        assert self.timeout_secs is not None
        reported: float | None = None  # the step end a report was made after
        while not self._stop.wait(min(1.0, self.timeout_secs / 8)):
            ended = current.ended
            if ended is None or ended == reported:
                continue
            waited = time.monotonic() - ended
            if waited > self.timeout_secs:
                reported = ended
                self._report(waited)

    def _report(self, waited: float) -> None:
        where = current.at + (f" ({current.detail})" if current.detail else "")
        _log.error(
            "No training step has ended for %.1f s (hang_timeout_secs=%g) after global step %d: "
            "the loop waits in %s. The stacks of all threads follow on stderr.%s",
            waited,
            self.timeout_secs,
            current.step,
            where,
            f" Exiting with status {EXIT_STATUS} (exit_on_hang)." if self.exit_on_hang else "",
        )
        _dump_stacks()
        if self.exit_on_hang:
            flush_and_exit(EXIT_STATUS)
