"""``pandas_input_fn`` for jaxspec (``tf.compat.v1.estimator.inputs.pandas_input_fn``),
and ``pandas_reading``, its signature and argument checks, shared with tf_bridge's."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from jaxspec.inputs._reader import table_input_fn
from jaxspec.inputs.reading import TableReading, input_fn_face
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


def pandas_reading(
    x: Any,
    y: Any = None,
    batch_size: int = 128,
    num_epochs: int | None = 1,
    shuffle: bool | None = None,
    queue_capacity: int | None = 1000,
    num_threads: int = 1,
    target_column: str = "target",
) -> TableReading:
    """Check ``pandas_input_fn``'s arguments (TF 2.15's names and defaults) and make its
    table now (x is copied: later changes to it are not seen).

    Args:
      x: a DataFrame; its columns (in their order) are the features, its index is not.
      y: None, a Series, or a DataFrame, with x's index.
      batch_size: rows per batch.
      num_epochs: passes over the rows; None repeats forever.
      shuffle: True or False; it must be given (TF 2.15's rule).
      queue_capacity: rows of the queue (the shuffling buffer); None: x's rows (4x when
        shuffling). A shuffling TF queue keeps a quarter of it (at least 1 row) until its
        readers are done.
      num_threads: readers, as numpy_input_fn's.
      target_column: a Series ``y``'s column name while batching (not used for a
        DataFrame ``y``).

    Returns:
      The ``TableReading``.

    Raises:
      jaxspec.inputs.pandas_io.PandasMissingError: pandas is not installed (an
        ImportError, and a TypeError as TF 2.15's).
      ValueError: shuffle is not a bool; x already has a column named target_column
        (with a y); x's and y's indexes differ; an integer argument out of range.
      TypeError: target_column is not a str.
    """
    pd = import_pandas()
    shuffle = check_shuffle(shuffle)
    table = pandas_table(pd, x, y, target_column)
    capacity, min_after_dequeue = pandas_capacity(queue_capacity, shuffle, table.rows)
    check_reader_args(batch_size, num_epochs, capacity, num_threads)
    return TableReading(
        "pandas_input_fn",
        lambda: table,
        batch_size,
        num_epochs,
        shuffle,
        capacity,
        min_after_dequeue,
        num_threads,
    )


pandas_input_fn = input_fn_face(
    pandas_reading,
    table_input_fn,
    "pandas_input_fn",
    __name__,
    """An input_fn feeding a pandas DataFrame in batches, as TF 2.15's ``pandas_input_fn``.

    The input_fn returns a generator of batches: ``features``, a dict from x's column
    names (in x's order) to numpy arrays ``[rows]``, when ``y`` is None, else
    ``(features, labels)``: labels an array for a Series ``y``, or a dict keyed by a
    DataFrame ``y``'s column names. Batching, epochs, shuffling, threads and the optional
    ``config`` argument are those of ``jaxspec.inputs.numpy_input_fn``. String columns
    stay numpy arrays of objects (JAX arrays cannot hold strings: turn them into numbers
    before training).

    Returns:
      ``input_fn(config=None)``, returning the generator of batches.
    """,
)
