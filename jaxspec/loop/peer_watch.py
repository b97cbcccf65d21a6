"""The peer watch: a process of a multi-process run that dies ends the others, with one
ERROR line naming it, the newest checkpoint and how to resume, and a documented status.

Without it a survivor waits inside a collective until JAX's coordination service aborts
the process (SIGABRT, XLA's C++ stack, nothing from jaxspec). The watch is a thread that,
while ``train`` runs, asks the coordination service which processes are alive
(``DistributedRuntimeClient.get_live_nodes``, what ``jax.experimental.multihost_utils``'s
``live_devices`` is built on). That call is a barrier among the live processes: it returns
when every live process has called it, leaving out any that died (the service knows at
once when a process's connection drops, at the latest after ``heartbeat_timeout_secs``
without a heartbeat). So every process's watch calls it in rounds, and all stop their
watches together: before each round a process publishes in the service's key-value store
whether it is stopping, and after the round every process reads the same answers.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from jaxspec.config.cluster import describe_process

_log = logging.getLogger("jaxspec")

EXIT_STATUS = 75  # os.EX_TEMPFAIL (sysexits.h): a temporary failure, relaunching may succeed
SLACK_SECS = 5.0  # beyond heartbeat_timeout_secs: a watch round, the log line and the exit
_KEY = "jaxspec/peer_watch"
_calls = [0]  # train calls watched in this process: keys of one call never meet another's


def _client() -> Any:
    """JAX's coordination client, or None where ``jax.distributed`` was not initialized.
    (JAX keeps it in ``jax._src.distributed.global_state``, where ``multihost_utils``
    reads it too; no public accessor exists in JAX 0.10.)"""
    from jax._src import distributed

    return distributed.global_state.client


def flush_and_exit(status: int) -> None:
    """Flush every logging handler and the standard streams, then end the process at once
    (``os._exit``: the main thread may be blocked inside a collective that never returns)."""
    for logger in (_log, logging.getLogger()):
        for handler in logger.handlers:
            try:
                handler.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
    os._exit(status)


class PeerWatch:
    """While active in a multi-process run (``jax.process_count() > 1`` and
    ``jax.distributed`` initialized; otherwise it does nothing), a lost process ends this
    one: one ERROR line names the lost process (task type and index, process id), the
    newest checkpoint and how to resume, then the process exits with status
    ``EXIT_STATUS`` (75) within ``heartbeat_timeout_secs + SLACK_SECS`` seconds of the loss.

    A JAX addition (tf.estimator's workers wait for a lost peer's session to come back).
    A ``jax.errors.JaxRuntimeError`` leaving the block (a collective may fail when a peer's
    connection resets) waits up to that bound for the watch's verdict before it goes up.

    Args:
      heartbeat_timeout_secs: seconds (``RunConfig.heartbeat_timeout_secs``, given to
        ``jax.distributed.initialize``): the longest the service takes to call a silent
        process dead.
      newest_checkpoint: ``() -> str | None``, the path of the newest checkpoint, read
        when a loss is reported.
      exit: the function that ends the process with a status (tests replace it).
    """

    def __init__(
        self,
        heartbeat_timeout_secs: float,
        newest_checkpoint: Callable[[], str | None],
        exit: Callable[[int], None] = flush_and_exit,
    ) -> None:
        self.heartbeat_timeout_secs = float(heartbeat_timeout_secs)
        self.period_secs = min(1.0, self.heartbeat_timeout_secs / 4)
        self._newest = newest_checkpoint
        self._exit = exit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._armed = False

    def __enter__(self) -> PeerWatch:
        client = _client()
        if client is None or jax.process_count() < 2:
            return self
        _calls[0] += 1
        ids = list(range(jax.process_count()))
        prefix = f"{_KEY}/{_calls[0]}"
        self._armed = True
        self._thread = threading.Thread(
            target=self._watch, args=(client, ids, prefix), name="jaxspec-peer-watch", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        if self._thread is None:
            return
        if isinstance(err, jax.errors.JaxRuntimeError):
            # A collective may fail (a connection reset) before the service calls the peer
            # dead: give the watch its bound to report a loss before the error goes up.
            deadline = time.monotonic() + self.heartbeat_timeout_secs + SLACK_SECS
            while time.monotonic() < deadline and self._thread.is_alive():
                time.sleep(0.1)
        self._armed = False
        self._stop.set()
        # every process stops in the same round; a peer that has gone ends the round too
        self._thread.join(timeout=self.heartbeat_timeout_secs + SLACK_SECS)

    def _watch(self, client: Any, ids: list[int], prefix: str) -> None:
        me = jax.process_index()
        for round_ in range(1 << 62):
            key = f"{prefix}/{round_}"
            try:
                client.key_value_set(f"{key}/{me}", "stop" if self._stop.is_set() else "go")
                live = client.get_live_nodes(ids)
                lost = [i for i in ids if i not in live]
                # every process reads the same answers: all watches end in the same round
                stopping = not lost and any(client.key_value_try_get(f"{key}/{i}") == "stop" for i in ids)
                if round_ and not lost:  # every live process read the last round's answers
                    client.key_value_delete(f"{prefix}/{round_ - 1}/{me}")
            except Exception as e:  # noqa: BLE001 - the service itself is gone (the chief)
                self._lost([0], f"the coordination service does not answer ({type(e).__name__})")
                return
            if lost:
                self._lost(lost, "it stopped answering the coordination service")
                return
            if stopping:
                return
            self._stop.wait(self.period_secs)

    def _lost(self, lost: list[int], why: str) -> None:
        if not self._armed:
            return  # training has ended here: what happens to the run now is not the watch's
        try:
            newest = self._newest()
        except Exception:  # noqa: BLE001 - the report matters more than the path
            newest = None
        _log.error(
            "Lost %s of the %d processes: %s (heartbeat_timeout_secs=%g). Newest checkpoint: %s. "
            "To resume, relaunch all %d processes with the same model_dir: training restarts "
            "from that checkpoint. Exiting with status %d.",
            ", ".join(describe_process(i) for i in lost),
            jax.process_count(),
            why,
            self.heartbeat_timeout_secs,
            newest or "none (training restarts from the beginning)",
            jax.process_count(),
            EXIT_STATUS,
        )
        self._exit(EXIT_STATUS)
