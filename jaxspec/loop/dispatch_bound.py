"""How many steps one grouped training dispatch may run, and how far the host may
dispatch ahead of the devices, so that a SIGTERM stops training within about a second.

A compiled loop cannot be cut once it runs. A plain Estimator's group (up to 1000
steps, ``jaxspec.loop.grouping``) is therefore dispatched as calls of the block loop
(``jaxspec.engine.block_loop``: its trip count is an argument, so no size compiles a
program of its own) of at most ``cap()`` steps, a power of two sized from the measured
step time to about ``DISPATCH_SECS`` seconds, and the host keeps at most two of them on the devices (one running, one
queued: it waits for the one before before dispatching the next). After a SIGTERM no
further scan is dispatched, so at most two scans run after the signal. The step time
is measured from the scans the host waits for (the fastest of the recent ones) and kept
per Estimator and mode; until one is measured (an Estimator's first train call), a scan
runs at most ``FIRST_DISPATCH_STEPS`` steps and the next waits for it.

Scans of about ``DISPATCH_SECS`` cost the devices nothing measurable: the host's part
of a dispatch is well under a millisecond, and the next scan is queued before the
running one ends.
"""

from __future__ import annotations

import collections
import time
import weakref
from typing import Any

import jax
import numpy as np

from jaxspec.loop.grouping import Chunk

#: Seconds of device work one grouped training dispatch aims at. At most two dispatches
#: are on the devices at a time, so about ``2 * DISPATCH_SECS`` of work follows a SIGTERM.
DISPATCH_SECS = 0.5
#: Steps of a dispatch before any step time is known (the first scan of a first call).
FIRST_DISPATCH_STEPS = 8

#: Measured scans an estimate looks back on: it is their fastest step (other work on
#: the machine only ever adds time), so one slow scan does not shrink the bound.
RECENT_SCANS = 8


class StepTimes:
    """Seconds per step of one Estimator's training scans: ``recent``, the latest
    ``RECENT_SCANS`` scans that ran an executable already run before, and ``first``,
    the fastest scan of a just compiled one (its first run may include compilation
    work), used only while ``recent`` is empty."""

    def __init__(self) -> None:
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_SCANS)
        self.first: float | None = None

    def add(self, secs_per_step: float, compiled: bool) -> None:
        """One scan's seconds per step; ``compiled``: its executable was new."""
        if compiled:
            self.first = secs_per_step if self.first is None else min(self.first, secs_per_step)
        else:
            self.recent.append(secs_per_step)

    def estimate(self) -> float | None:
        """Seconds per step (None before any scan was timed)."""
        return min(self.recent) if self.recent else self.first


# Per ModeCache (one Estimator's mode): its StepTimes, kept across train calls.
_step_times: weakref.WeakKeyDictionary[Any, StepTimes] = weakref.WeakKeyDictionary()


def _floor_pow2(x: float) -> int:
    return 1 << (max(1, int(x)).bit_length() - 1)


class DispatchBound:
    """One train call's bound on its grouped dispatches.

    Args:
      mode_cache: the Estimator's ModeCache of TRAIN (the measured step time is kept
        there across calls).
      limit: the most steps of a group (``group_limit``); the cap never exceeds it.
      stopped: ``() -> bool``, True once a SIGTERM came (no further dispatch).

    Attributes:
      done_step: the end step of the latest scan known to be finished on the devices
        (0 before any): how far training had surely come when a signal arrived.
    """

    def __init__(self, mode_cache: Any, limit: int, stopped: Any) -> None:
        self._cache = mode_cache
        self._limit = max(1, int(limit))
        self._stopped = stopped
        self._in_flight: collections.deque[tuple[Any, int, int, float, bool]] = collections.deque()
        self.done_step = 0

    @property
    def step_secs(self) -> float | None:
        """Seconds per step, as measured for this Estimator and mode (None: not yet)."""
        times = _step_times.get(self._cache)
        return None if times is None else times.estimate()

    def cap(self) -> int:
        """The most steps the next dispatch may run (a power of two, or ``limit``)."""
        secs = self.step_secs
        if secs is None:
            return min(self._limit, FIRST_DISPATCH_STEPS)
        steps = DISPATCH_SECS / max(secs, 1e-9)
        return self._limit if steps >= self._limit else _floor_pow2(steps)

    def may_dispatch(self) -> bool:
        """Wait until the devices hold at most one scan of this call (none while no
        step time is known, so the first one is timed); False after a SIGTERM: dispatch
        nothing more."""
        keep = 0 if self.step_secs is None else 1
        while len(self._in_flight) > keep and not self._stopped():
            self._wait_oldest()
        return not self._stopped()

    def dispatched(self, out: Any, first: int, steps: int, started: float, compiled: bool = False) -> None:
        """Record a scan just dispatched: ``out`` its TrainLoopOut, running global steps
        ``first + 1 .. first + steps``; ``started``: ``time.perf_counter()`` before its
        dispatch (a backend may run it inside the dispatch call); ``compiled``: its
        executable was compiled by that dispatch (its first run may be slower still: XLA
        may finish compiling then), so its time may only lower the estimate."""
        self._in_flight.append((out.losses, first + steps, steps, started, compiled))

    def wait_through(self, step: int) -> None:
        """Wait for (and time) every scan of this call up to global step ``step``: the
        loop is about to read their losses."""
        while self._in_flight and self._in_flight[0][1] <= step:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        """Wait for the oldest scan and time it from its dispatch to now: its device time,
        plus whatever it waited for (the scan queued before it, a first run, a host
        that looked late), never less. A later start (the end of the wait before) would
        remove the queueing, but a scan that finished unobserved during that wait
        (a backend may run it inside its dispatch call) would then measure near zero,
        and the bound would grow without limit: the estimate stays on the safe side."""
        losses, end, steps, started, compiled = self._in_flight.popleft()
        losses.block_until_ready()
        now = time.perf_counter()
        times = _step_times.setdefault(self._cache, StepTimes())
        times.add(max(now - started, 1e-9) / steps, compiled)
        self.done_step = max(self.done_step, end)


def block_rows(args: tuple[Any, ...], start: int, steps: int, block: int) -> tuple[Any, ...]:
    """Rows ``start .. start + steps - 1`` of host arrays stacked ``[n, ...]``, as a block
    of ``block`` rows (the rest zeros, never run): the block loop's input."""
    if start == 0 and steps == block and len(jax.tree.leaves(args)[0]) == block:
        return args

    def rows(x: Any) -> np.ndarray:
        x = np.asarray(x)
        out = np.zeros((block,) + x.shape[1:], x.dtype)
        out[:steps] = x[start : start + steps]
        return out

    return jax.tree.map(rows, args)


def dispatch_bounded(
    loop: Any,
    bound: DispatchBound,
    state: Any,
    first: int,
    args: tuple[Any, ...],
    block: int,
    stoppable: bool = True,
) -> list[Chunk]:
    """Dispatch a training group (host arrays stacked ``[n, ...]``) as calls of the
    block loop (``jaxspec.engine.block_loop``, blocks of ``block`` rows), each of at
    most ``min(bound.cap(), block)`` steps, each from the previous one's state, the host
    paced to the devices (``bound.may_dispatch`` before every call but the first: the
    caller paced that one). One compiled program serves every size.

    Returns:
      The calls dispatched, as Chunks (their TrainLoopOut has ``block`` rows per step
      field, of which the Chunk's ``steps`` count): all of them, or (``stoppable``)
      those dispatched before a SIGTERM came (the group then ends there, not finished).
      A group whose input position is saved is not stoppable: every step read must be
      trained (the position cannot go back), so such groups are at most ``cap()`` steps
      long.
    """
    chunks: list[Chunk] = []
    n = int(np.shape(jax.tree.leaves(args)[0])[0])
    done = 0
    while done < n:
        if chunks and not bound.may_dispatch() and stoppable:
            break
        size = min(n - done, bound.cap(), block)
        part = block_rows(args, done, size, block)
        started = time.perf_counter()
        out = loop.dispatch(state, first + done, *part, block_steps=size)
        bound.dispatched(out, first + done, size, started, getattr(loop, "last_compile_secs", 0.0) > 0)
        chunks.append(Chunk(first + done, size, out))
        state, done = out.state, done + size
    return chunks
