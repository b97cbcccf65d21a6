"""jaxspec's feed of a ``TableReading``: an input_fn returning a generator of numpy
batches of the table, in TF's queue order (``jaxspec.inputs._queue``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxspec.inputs._queue import index_batches
from jaxspec.inputs.reading import TableReading
from jaxspec.rules.feeding import Table, queue_warnings

_log = logging.getLogger("jaxspec")


def table_input_fn(reading: TableReading) -> Callable[..., Iterator[Any]]:
    """An input_fn reading the table ``reading.make_table()`` gives (built, and checked,
    each time input_fn is called, as TF builds its queue then). The input_fn takes an
    optional ``config`` whose ``tf_random_seed`` seeds the shuffling."""

    def input_fn(config: Any = None) -> Iterator[Any]:
        table = reading.make_table()
        for line in queue_warnings(reading.shuffle, reading.num_threads, reading.num_epochs):
            _log.warning("%s", line)
        rng = np.random.default_rng(getattr(config, "tf_random_seed", None))
        order = index_batches(
            table.rows,
            reading.batch_size,
            reading.num_epochs,
            reading.shuffle,
            reading.capacity,
            reading.num_threads,
            rng,
        )
        return _batches(table, order)

    return input_fn


def _batches(table: Table, order: Iterator[np.ndarray]) -> Iterator[Any]:
    for indices in order:
        yield table.split({key: column[indices] for key, column in table.columns.items()})
