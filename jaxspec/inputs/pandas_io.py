"""``pandas_input_fn`` for jaxspec (``tf.compat.v1.estimator.inputs.pandas_input_fn``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from jaxspec.inputs._reader import table_input_fn
from jaxspec.rules.feeding import check_reader_args, check_shuffle, pandas_capacity, pandas_table


class PandasMissingError(ImportError, TypeError):
    """pandas is not installed. An ImportError, and a TypeError too: TF 2.15 raised
    TypeError there, so code catching that still does."""


def import_pandas() -> ModuleType:
    """The pandas module.

    Raises:
      PandasMissingError: pandas is not installed (the message names the extra).
    """
    try:
        return importlib.import_module("pandas")
    except ImportError as err:
        raise PandasMissingError(
            "pandas_input_fn needs pandas, which is not installed: pip install 'jaxspec[pandas]'."
        ) from err


def pandas_input_fn(
    x: Any,
    y: Any = None,
    batch_size: int = 128,
    num_epochs: int | None = 1,
    shuffle: bool | None = None,
    queue_capacity: int | None = 1000,
    num_threads: int = 1,
    target_column: str = "target",
) -> Callable[..., Iterator[Any]]:
    """An input_fn feeding a pandas DataFrame in batches, as TF 2.15's ``pandas_input_fn``.

    The input_fn returns a generator of batches: ``features``, a dict from x's column
    names (in x's order; the index is not a feature) to numpy arrays ``[rows]``, when
    ``y`` is None, else ``(features, labels)``: labels an array for a Series ``y``, or a
    dict keyed by a DataFrame ``y``'s column names. Batching, epochs, shuffling, threads
    and the optional ``config`` argument are those of ``jaxspec.inputs.numpy_input_fn``.
    String columns stay numpy arrays of objects (JAX arrays cannot hold strings: turn
    them into numbers before training).

    Args:
      x: a DataFrame (copied when the input_fn is made; later changes to it are not seen).
      y: None, a Series, or a DataFrame, with x's index.
      batch_size: rows per batch.
      num_epochs: passes over the rows; None repeats forever.
      shuffle: True or False; it must be given (TF 2.15's rule).
      queue_capacity: rows of the shuffling buffer; None: x's rows (4x when shuffling).
      num_threads: readers (see numpy_input_fn).
      target_column: a Series ``y``'s column name while batching (not used for a
        DataFrame ``y``).

    Returns:
      ``input_fn(config=None)``, returning the generator of batches.

    Raises:
      PandasMissingError: pandas is not installed (an ImportError and a TypeError).
      ValueError: shuffle is not a bool; x already has a column named target_column
        (with a y); x's and y's indexes differ; an integer argument out of range.
      TypeError: target_column is not a str.
    """
    pd = import_pandas()
    check_shuffle(shuffle)
    table = pandas_table(pd, x, y, target_column)
    capacity, _ = pandas_capacity(queue_capacity, bool(shuffle), table.rows)
    check_reader_args(batch_size, num_epochs, capacity, num_threads)
    return table_input_fn(lambda: table, batch_size, num_epochs, bool(shuffle), capacity, num_threads)
