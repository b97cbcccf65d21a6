"""``pandas_input_fn`` for TF model_fns (``tf.compat.v1.estimator.inputs.pandas_input_fn``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxspec.inputs.pandas_io import import_pandas
from jaxspec.rules.feeding import check_reader_args, check_shuffle, pandas_capacity, pandas_table
from tf_bridge.runtime.inputs.queue import dequeue_batch, enqueue_columns, require_graph_mode


def pandas_input_fn(
    x: Any,
    y: Any = None,
    batch_size: int = 128,
    num_epochs: int | None = 1,
    shuffle: bool | None = None,
    queue_capacity: int | None = 1000,
    num_threads: int = 1,
    target_column: str = "target",
) -> Callable[[], Any]:
    """An input_fn feeding a pandas DataFrame through a TF1 queue, as TF 2.15's
    ``pandas_input_fn``.

    The input_fn returns one dequeued batch: ``features``, a dict from x's column names
    (in x's order; the index is not a feature) to ``[batch]`` tensors, when ``y`` is
    None, else ``(features, labels)``: a tensor for a Series ``y``, or a dict keyed by a
    DataFrame ``y``'s column names. Text columns become ``tf.string`` (TF 2.15 refused
    them with a TypeError). Queue, batching, epochs, shuffling, threads and the end of
    the input are those of ``tf_bridge.estimator.inputs.numpy_input_fn``.

    Args:
      x: a DataFrame (copied when the input_fn is made).
      y: None, a Series, or a DataFrame, with x's index.
      batch_size: rows per batch.
      num_epochs: passes over the rows; None repeats forever.
      shuffle: True or False; it must be given (TF 2.15's rule).
      queue_capacity: rows the queue holds; None: x's rows (4x when shuffling). At
        least a quarter of it (and 1 row) stays in a shuffling queue.
      num_threads: reader threads.
      target_column: a Series ``y``'s column name while queued (not used for a
        DataFrame ``y``).

    Returns:
      ``input_fn()``, returning the batch's tensors.

    Raises:
      jaxspec.inputs.pandas_io.PandasMissingError: pandas is not installed (an
        ImportError and a TypeError, as TF 2.15's TypeError).
      ValueError: shuffle is not a bool; x already has a column named target_column
        (with a y); x's and y's indexes differ; an integer argument out of range.
      TypeError: target_column is not a str.
      RuntimeError: input_fn is called while TF executes eagerly.
    """
    pd = import_pandas()
    check_shuffle(shuffle)
    table = pandas_table(pd, x, y, target_column)
    capacity, min_after_dequeue = pandas_capacity(queue_capacity, bool(shuffle), table.rows)
    check_reader_args(batch_size, num_epochs, capacity, num_threads)

    def input_fn() -> Any:
        require_graph_mode("pandas_input_fn")
        queue = enqueue_columns(
            table.columns, capacity, bool(shuffle), min_after_dequeue, num_threads, batch_size, num_epochs
        )
        return table.split(dequeue_batch(queue, list(table.columns), batch_size, num_epochs))

    return input_fn
