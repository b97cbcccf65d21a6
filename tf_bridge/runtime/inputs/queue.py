"""A table of numpy columns fed into a TF1 queue by queue runners, as TF 2.15's
``numpy_input_fn`` and ``pandas_input_fn`` feed theirs.

Each of ``num_threads`` readers (``jaxspec.rules.feeding.RowReader``) is one enqueue op
of a ``tf.compat.v1.train.QueueRunner``: the op enqueues the rows a
``tf.compat.v1.numpy_function`` reads, and the function raises StopIteration after the
reader's last epoch, which TensorFlow turns into OutOfRangeError, the error that ends a
queue runner's thread; the last thread to end closes the queue, after which dequeues get
the rows left and then OutOfRangeError. The runner is added to the graph's
``QUEUE_RUNNERS`` collection, so ``MonitoredSession`` (tf_bridge's runner) and
``tf.compat.v1.train.start_queue_runners`` start it.

TF 2.15 fed the rows through placeholders with its own QueueRunner subclass, and also
enqueued each row's index; neither is visible in the batches.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from jaxspec.inputs.reading import TableReading
from jaxspec.rules.feeding import RowReader, queue_warnings
from jaxspec.spec.fn_types import PyTree


def column_dtype(values: np.ndarray) -> tf.DType:
    """The TF dtype of a column: numpy's, or ``tf.string`` for strings and objects
    (TF 2.15 refused object columns, which pandas gives for text, with a TypeError)."""
    if values.dtype.kind in ("U", "S", "O", "T"):
        return tf.string
    return tf.as_dtype(values.dtype)


class _ReaderFeed:
    """The numpy_function of one reader: the next chunk of every column."""

    def __init__(self, reader: RowReader, columns: list[np.ndarray], dtypes: list[tf.DType]) -> None:
        self._reader = reader
        self._columns = [
            c.astype(object) if d == tf.string else c for c, d in zip(columns, dtypes, strict=True)
        ]

    def __call__(self) -> list[np.ndarray]:
        indices = self._reader.next_chunk()
        if indices is None:
            raise StopIteration  # TensorFlow raises OutOfRangeError: the reader's thread ends
        return [column[indices] for column in self._columns]


def enqueue_columns(
    columns: Mapping[str, np.ndarray],
    capacity: int,
    shuffle: bool,
    min_after_dequeue: int,
    num_threads: int,
    batch_size: int,
    num_epochs: int | None,
    name: str = "enqueue_input",
) -> tf.queue.QueueBase:
    """A queue of the table's rows, fed by a queue runner in the default graph.

    Args:
      columns: column name -> array, rows on axis 0 (all the same rows).
      capacity: rows the queue holds.
      shuffle: a ``tf.queue.RandomShuffleQueue`` (keeping ``min_after_dequeue`` rows
        until the readers are done, its seed from the graph's) with readers starting at
        random rows, else a ``tf.queue.FIFOQueue``.
      num_threads: readers, each reading ``num_epochs`` epochs.
      batch_size: rows per enqueue.
      num_epochs: passes per reader, or None for no end.
      name: the name scope of the queue's ops.

    Returns:
      The queue; its components are the columns, in order.
    """
    for line in queue_warnings(shuffle, num_threads, num_epochs):
        tf.compat.v1.logging.warning(line)
    values = [np.asarray(v) for v in columns.values()]
    dtypes = [column_dtype(v) for v in values]
    shapes = [v.shape[1:] for v in values]
    rows = len(values[0])
    starts = random.Random()
    with tf.compat.v1.name_scope(name):
        if shuffle:
            queue = tf.queue.RandomShuffleQueue(capacity, min_after_dequeue, dtypes=dtypes, shapes=shapes)
        else:
            min_after_dequeue = 0
            queue = tf.queue.FIFOQueue(capacity, dtypes=dtypes, shapes=shapes)
        enqueue_ops = []
        for i in range(num_threads):
            reader = RowReader(rows, batch_size, num_epochs, starts.randrange(rows) if shuffle else 0)
            chunk = tf.compat.v1.numpy_function(
                _ReaderFeed(reader, values, dtypes), [], dtypes, stateful=True, name=f"read_{i}"
            )
            enqueue_ops.append(queue.enqueue_many(chunk))
        tf.compat.v1.train.add_queue_runner(tf.compat.v1.train.QueueRunner(queue, enqueue_ops))
        _fill_summary(queue, capacity, min_after_dequeue)
    return queue


def _fill_summary(queue: tf.queue.QueueBase, capacity: int, min_after_dequeue: int) -> None:
    """TF 2.15's scalar summary of how full the queue is above ``min_after_dequeue``
    (tag ``queue/<queue name>fraction_over_<min>_of_<capacity - min>_full``)."""
    room = max(capacity - min_after_dequeue, 1)
    above = tf.cast(tf.maximum(0, queue.size() - min_after_dequeue), tf.float32)
    tf.compat.v1.summary.scalar(
        f"queue/{queue.name}fraction_over_{min_after_dequeue}_of_{capacity - min_after_dequeue}_full",
        above * (1.0 / room),
    )


def dequeue_batch(
    queue: tf.queue.QueueBase, keys: list[str], batch_size: int, num_epochs: int | None
) -> dict[str, tf.Tensor]:
    """One batch of the queue as a dict of tensors: ``batch_size`` rows every time when
    ``num_epochs`` is None (``dequeue_many``: the batch dimension is static), else up
    to ``batch_size`` (``dequeue_up_to``: the last batch may be short)."""
    if num_epochs is None:
        batch = queue.dequeue_many(batch_size)
    else:
        batch = queue.dequeue_up_to(batch_size)
    if not isinstance(batch, (list, tuple)):
        batch = [batch]
    return dict(zip(keys, batch, strict=True))


def require_graph_mode(fn_name: str) -> None:
    """Queues and queue runners need a graph.

    Raises:
      RuntimeError: TensorFlow is executing eagerly (outside an Estimator's graph).
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            f"the input_fn of {fn_name} builds TF1 queues, which need graph mode: pass it to a tf_bridge "
            "Estimator (which calls it in its graph), or call it inside `with tf.Graph().as_default():`."
        )


def queue_input_fn(reading: TableReading) -> Callable[[], PyTree]:
    """tf_bridge's feed of a ``TableReading``: an input_fn that, called in a graph, makes
    the table, queues its rows (``enqueue_columns``) and returns one dequeued batch, as
    features or ``(features, labels)``.

    Raises (when input_fn is called):
      RuntimeError: TF is executing eagerly; or what making the table raises.
    """

    def input_fn() -> PyTree:
        table = reading.make_table()
        require_graph_mode(reading.fn_name)
        queue = enqueue_columns(
            table.columns,
            reading.capacity,
            reading.shuffle,
            reading.min_after_dequeue,
            reading.num_threads,
            reading.batch_size,
            reading.num_epochs,
        )
        return table.split(dequeue_batch(queue, list(table.columns), reading.batch_size, reading.num_epochs))

    return input_fn
