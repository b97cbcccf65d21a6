"""The order in which TF 2.15's input queues hand out rows, without threads: the batches
of row indices that ``numpy_input_fn`` and ``pandas_input_fn`` give.

TF fills a queue from ``num_threads`` reader threads (``jaxspec.rules.feeding.RowReader``)
and dequeues ``batch_size`` rows at a time. Here the readers take turns, a chunk each (TF
interleaves them as its threads run), and:

- unshuffled, the queue is FIFO: batches are the readers' rows in order;
- shuffled, the queue is TF's random-shuffle queue with its readers far ahead of the
  training loop, as they are in TF once it runs: the buffer is kept at ``capacity`` rows
  and each row handed out is drawn uniformly from it; once the readers are done the rows
  left come out in random order. (``min_after_dequeue`` only matters in TF while the
  buffer is still filling.)

With ``num_epochs`` set the last batch holds the rows left (TF's ``dequeue_up_to``);
with None the batches are all full and never end (TF's ``dequeue_many``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from jaxspec.rules.feeding import RowReader


class _Stream:
    """The readers' rows, chunk by chunk in turn; ``take(n)`` gives up to n of them."""

    def __init__(self, readers: list[RowReader]) -> None:
        self._readers = list(readers)
        self._turn = 0
        self._pending = np.zeros(0, np.int64)

    def _next_chunk(self) -> np.ndarray | None:
        while self._readers:
            self._turn %= len(self._readers)
            chunk = self._readers[self._turn].next_chunk()
            if chunk is None:
                del self._readers[self._turn]
                continue
            self._turn += 1
            return chunk
        return None

    def take(self, n: int) -> np.ndarray:
        """Up to ``n`` row indices (fewer only when every reader is done)."""
        parts, have = [self._pending], len(self._pending)
        while have < n:
            chunk = self._next_chunk()
            if chunk is None:
                break
            parts.append(chunk)
            have += len(chunk)
        rows = np.concatenate(parts)
        self._pending = rows[n:]
        return rows[:n]


def index_batches(
    rows: int,
    batch_size: int,
    num_epochs: int | None,
    shuffle: bool,
    capacity: int,
    num_threads: int,
    rng: np.random.Generator,
) -> Iterator[np.ndarray]:
    """Batches of row indices (int64), in the order TF's queue gives them (see the
    module docstring). Reader starts are drawn from ``rng`` when shuffling."""
    starts = [int(rng.integers(rows)) if shuffle else 0 for _ in range(num_threads)]
    stream = _Stream([RowReader(rows, batch_size, num_epochs, start) for start in starts])
    if not shuffle:
        while True:
            batch = stream.take(batch_size)
            if len(batch) == 0 or (num_epochs is None and len(batch) < batch_size):
                return
            yield batch
    yield from _shuffled(stream, batch_size, capacity, rng)


def _shuffled(
    stream: _Stream, batch_size: int, capacity: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """A full buffer: each row out is a uniform draw from it and its slot is refilled."""
    buffer = stream.take(capacity)
    while len(buffer) == capacity:
        slots = rng.integers(capacity, size=batch_size)
        refill = stream.take(batch_size)
        out = np.empty(batch_size, np.int64)
        for i, slot in enumerate(slots):
            out[i] = buffer[slot]
            if i < len(refill):
                buffer[slot] = refill[i]
            else:  # the readers are done: the slot empties
                out = out[: i + 1]
                buffer = np.delete(buffer, slot)
                rest = rng.permutation(buffer)
                yield from _chunks(np.concatenate([out, rest]), batch_size)
                return
        yield out
    yield from _chunks(rng.permutation(buffer), batch_size)


def _chunks(rows: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(rows), batch_size):
        yield rows[start : start + batch_size]
