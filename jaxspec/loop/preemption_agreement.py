"""The stop step of a preemption in a multi-process run, agreed by every process.

A scheduler often signals one host first. That process alone must not leave the
collectives: at every loop boundary each process publishes, in JAX's coordination
service, the global step it reached and whether it was signalled (the signal's name),
waits until every process has published (a barrier), and reads all answers. All read the
same answers, so all stop at the first boundary where any process was signalled, save
the same checkpoint together, and exit together.

JAX's own mechanism (``multihost_utils.reached_preemption_sync_point``, the coordination
service's preemption sync manager) is not used: its notifier is a C++ SIGTERM handler
only (Slurm's SIGUSR1 cannot reach it, and the Python handler of
``PreemptionWatcher`` replaces it), its protocol runs once per process lifetime (one
barrier name), and it stops at a call counter equal to the fastest process's plus one,
which a loop of ``iterations_per_loop`` steps must count itself.

Cost: three requests to the coordination service per boundary (publish, barrier, read),
measured at about 1.6 ms per boundary with two processes on 127.0.0.1 (docs/cluster.md).
A one-process run makes none.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxspec.loop import peer_watch

_KEY = "jaxspec/preemption"
_NOT_SIGNALLED = "-"
#: Milliseconds a boundary waits for the slowest process: as long as a collective would
#: (a lost process ends the run through the peer watch; a stuck one is the hang
#: watchdog's). The coordination service takes a 32-bit count of milliseconds.
WAIT_MS = 24 * 3600 * 1000
_calls = [0]  # train calls of this process: the keys of one never meet another's


class StopAgreement:
    """One train call's agreement rounds, one per loop boundary, on ``client`` (JAX's
    ``DistributedRuntimeClient``) among ``process_count`` processes; ``me`` is this
    process's index; ``call`` numbers the train call (the same on every process: each
    runs the same calls), so the keys of one call never meet another's. ``join()`` makes
    one where the run has several processes."""

    def __init__(self, client: Any, process_count: int, me: int, call: int) -> None:
        self._client = client
        self._count = process_count
        self._me = me
        self._prefix = f"{_KEY}/{call}"
        self.rounds = 0

    @classmethod
    def join(cls) -> StopAgreement | None:
        """The agreement of this train call, or None in a one-process run (or where
        ``jax.distributed`` was not initialized): nothing is then exchanged."""
        client = peer_watch._client()
        if client is None or jax.process_count() < 2:
            return None
        _calls[0] += 1
        return cls(client, jax.process_count(), jax.process_index(), _calls[0])

    def round(self, global_step: int, signalled: str | None) -> tuple[int, str] | None:
        """One boundary: publish ``global_step`` and ``signalled`` (the name of the signal
        this process received, or None), wait for every process, and return the lowest
        process index that was signalled with its signal's name (None: none was).

        Raises:
          RuntimeError: the processes are at different global steps (their loops
            differ: a bug, since every process runs the same loops), or an answer is
            missing.
          jax.errors.JaxRuntimeError: the coordination service failed the barrier (a
            lost process; the peer watch reports it).
        """
        key = f"{self._prefix}/{self.rounds}"
        self._client.key_value_set(f"{key}/{self._me}", f"{int(global_step)} {signalled or _NOT_SIGNALLED}")
        self._client.wait_at_barrier(f"{self._prefix}/barrier", WAIT_MS)
        answers = self._client.key_value_dir_get(f"{key}/")
        if self._me == 0 and self.rounds:  # every process has read the round before
            self._client.key_value_delete(f"{self._prefix}/{self.rounds - 1}/")
        self.rounds += 1
        return _decide(answers, self._count, global_step)


def _decide(answers: list[tuple[str, str]], process_count: int, global_step: int) -> tuple[int, str] | None:
    """The first signalled process of one round's ``answers`` (``(key, "STEP NAME")``
    pairs, the key ending in the process index), after checking that every process
    answered from ``global_step``."""
    by_process = {}
    for key, value in answers:
        step, name = value.split(" ", 1)
        by_process[int(key.rsplit("/", 1)[1])] = (int(step), name)
    if sorted(by_process) != list(range(process_count)):
        raise RuntimeError(
            f"preemption agreement: answers from processes {sorted(by_process)}, expected all "
            f"{process_count}."
        )
    steps = {p: s for p, (s, _) in by_process.items()}
    if set(steps.values()) != {int(global_step)}:
        raise RuntimeError(
            f"preemption agreement: the processes reached different loop boundaries (global step "
            f"of each process: {steps}); every process must run the same training loops."
        )
    signalled = [(p, name) for p, (_, name) in sorted(by_process.items()) if name != _NOT_SIGNALLED]
    return signalled[0] if signalled else None
