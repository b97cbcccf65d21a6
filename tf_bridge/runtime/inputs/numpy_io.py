"""``numpy_input_fn`` for TF model_fns (``tf.compat.v1.estimator.inputs.numpy_input_fn``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxspec.rules.feeding import check_reader_args, check_shuffle, numpy_table
from tf_bridge.runtime.inputs.queue import dequeue_batch, enqueue_columns, require_graph_mode


def numpy_input_fn(
    x: Any,
    y: Any = None,
    batch_size: int = 128,
    num_epochs: int | None = 1,
    shuffle: bool | None = None,
    queue_capacity: int = 1000,
    num_threads: int = 1,
) -> Callable[[], Any]:
    """An input_fn feeding numpy arrays through a TF1 queue, as TF 2.15's ``numpy_input_fn``.

    Called in a graph (a tf_bridge Estimator calls it in its own), the input_fn builds a
    queue fed by a queue runner (``tf_bridge.runtime.inputs.queue``) and returns one
    dequeued batch: ``features`` (a dict of tensors with x's keys, or one tensor when
    ``x`` is an array) when ``y`` is None, else ``(features, labels)`` (a tensor, or a
    dict with y's keys). Tensors are ``[batch, ...]`` of the arrays' dtypes (strings as
    ``tf.string``). Rows come in order, or shuffled through a RandomShuffleQueue of
    ``queue_capacity`` rows (min_after_dequeue a quarter of it) with readers starting at
    random rows; batches cross epoch boundaries. With ``num_epochs`` set the batch
    dimension is unknown, the last batch holds the rows left and the next run raises
    ``tf.errors.OutOfRangeError`` (which ends train/evaluate/predict); with None every
    batch has ``batch_size`` rows and the input never ends. Each of ``num_threads``
    readers reads ``num_epochs`` epochs (TF's behaviour; a warning is logged).

    Args:
      x: a numpy array (one feature) or a dict of numpy arrays, rows on axis 0.
      y: None, a numpy array, or a dict of numpy arrays with x's rows.
      batch_size: rows per batch.
      num_epochs: passes over the data; None repeats forever.
      shuffle: True or False; it must be given (TF 2.15's rule).
      queue_capacity: rows the queue holds.
      num_threads: reader threads.

    Returns:
      ``input_fn()``, returning the batch's tensors.

    Raises:
      ValueError: shuffle is not a bool, or batch_size, queue_capacity, num_threads or
        num_epochs is not an integer as described (TF 2.15 checks only shuffle here).
        When input_fn is called, as TF: TypeError when x is neither an array nor a dict;
        ValueError for an empty x, an empty dict y, keys in both x and y, or arrays of
        different rows; RuntimeError when TF is executing eagerly (queues need a graph).
    """
    check_shuffle(shuffle)
    check_reader_args(batch_size, num_epochs, queue_capacity, num_threads)

    def input_fn() -> Any:
        table = numpy_table(x, y)
        require_graph_mode("numpy_input_fn")
        min_after_dequeue = int(queue_capacity / 4)
        queue = enqueue_columns(
            table.columns,
            queue_capacity,
            bool(shuffle),
            min_after_dequeue,
            num_threads,
            batch_size,
            num_epochs,
        )
        return table.split(dequeue_batch(queue, list(table.columns), batch_size, num_epochs))

    return input_fn
