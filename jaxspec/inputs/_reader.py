"""The input_fn both of jaxspec's readers return: a generator of numpy batches of a
``jaxspec.rules.feeding.Table``, in TF's queue order (``jaxspec.inputs._queue``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxspec.inputs._queue import index_batches
from jaxspec.rules.feeding import Table, queue_warnings

_log = logging.getLogger("jaxspec")


def table_input_fn(
    make_table: Callable[[], Table],
    batch_size: int,
    num_epochs: int | None,
    shuffle: bool,
    capacity: int,
    num_threads: int,
) -> Callable[..., Iterator[Any]]:
    """An input_fn reading the table ``make_table()`` gives (built, and checked, each
    time input_fn is called, as TF builds its queue then)."""

    def input_fn(config: Any = None) -> Iterator[Any]:
        table = make_table()
        for line in queue_warnings(shuffle, num_threads, num_epochs):
            _log.warning("%s", line)
        seed = getattr(config, "tf_random_seed", None)
        rng = np.random.default_rng(seed)
        order = index_batches(table.rows, batch_size, num_epochs, shuffle, capacity, num_threads, rng)
        return _batches(table, order)

    return input_fn


def _batches(table: Table, order: Iterator[np.ndarray]) -> Iterator[Any]:
    for indices in order:
        yield table.split({key: column[indices] for key, column in table.columns.items()})
