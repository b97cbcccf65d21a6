"""Input read ahead of the device: the next loops' host batches are read from input_fn,
stacked and masked in a background thread while the current loop runs."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

THREAD_NAME = "jaxspec-input-prefetch"
_END = object()


class GroupPrefetcher:
    """Reads groups of steps in a background thread, in order, into a bounded queue.

    Args:
      next_group: ``next_group(max_steps) -> (batch, mask, n) | None`` (the feeder's);
        called only from the background thread once started.
      sizes: the ``max_steps`` of each group in turn, given how many steps the previous
        groups actually had: ``sizes(steps_so_far) -> int``, or 0 to stop reading.
      depth: groups read ahead at most (the queue's bound).
      counted: the steps a group counts for in ``sizes`` (default: its step count,
        ``group[2]``; the feeder's groups count input steps, ``StepGroup.batches``).

    ``get(max_steps)`` returns the next group exactly as ``next_group(max_steps)`` would
    have; an exception raised by the input (input_fn's iterator) is re-raised there, in
    the caller's thread, with its own type and traceback. ``close()`` stops the thread
    and waits for it; call it on every way out (end, early stop, errors, SIGTERM).
    """

    def __init__(
        self,
        next_group: Callable[[int], Any],
        sizes: Callable[[int], int],
        depth: int = 2,
        counted: Callable[[Any], int] = lambda group: int(group[2]),
    ) -> None:
        self._next_group = next_group
        self._counted = counted
        self._sizes = sizes
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._expected: list[int] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        done = 0
        try:
            while not self._stop.is_set():
                size = self._sizes(done)
                if size <= 0:
                    break
                group = self._next_group(size)
                if group is None:
                    break
                with self._lock:
                    self._expected.append(size)
                if not self._put((size, group)):
                    return
                # Hand the interpreter lock over now: the caller is likely waiting for this
                # group, and would otherwise wait for the interpreter's switch interval
                # (5 ms) while this thread reads the next one.
                time.sleep(0)
                done += self._counted(group)
        except BaseException as err:
            self._put(err)
            return
        self._put(_END)

    def get(self, max_steps: int) -> Any:
        """The next group (None at the end of the input), read for ``max_steps`` steps.

        Raises:
          whatever the input raised while reading it (same exception object).
          RuntimeError: the caller asks for another group size than was read ahead
            (a bug in the caller's size sequence, never the user's).
        """
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # later calls see the end too
            return None
        if isinstance(item, BaseException):
            raise item
        size, group = item
        if size != max_steps:
            raise RuntimeError(f"prefetch read a group of {size} steps where {max_steps} were asked for.")
        return group

    def close(self) -> None:
        """Stop reading and wait for the thread (it ends within one input read)."""
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
