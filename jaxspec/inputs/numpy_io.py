"""``numpy_input_fn`` for jaxspec (``tf.compat.v1.estimator.inputs.numpy_input_fn``), and
``numpy_reading``, its signature and argument checks, shared with tf_bridge's."""

from __future__ import annotations

from typing import Any

from jaxspec.inputs._reader import table_input_fn
from jaxspec.inputs.reading import TableReading, input_fn_face
from jaxspec.rules.feeding import check_reader_args, check_shuffle, numpy_table


def numpy_reading(
    x: Any,
    y: Any = None,
    batch_size: int = 128,
    num_epochs: int | None = 1,
    shuffle: bool | None = None,
    queue_capacity: int = 1000,
    num_threads: int = 1,
) -> TableReading:
    """Check ``numpy_input_fn``'s arguments (TF 2.15's names and defaults) and say what to
    read; the table itself is made, and checked, when the input_fn is called.

    Args:
      x: a numpy array (one feature) or a dict of numpy arrays, rows on axis 0.
      y: None, a numpy array, or a dict of numpy arrays with x's rows.
      batch_size: rows per batch.
      num_epochs: passes over the data; None repeats forever.
      shuffle: True or False; it must be given (TF 2.15's rule).
      queue_capacity: rows of the queue (the shuffling buffer; a shuffling TF queue keeps
        a quarter of them until its readers are done).
      num_threads: readers, each reading ``num_epochs`` epochs (TF's behaviour: more
        epochs than one reader; a warning is logged).

    Returns:
      The ``TableReading``.

    Raises:
      ValueError: shuffle is not a bool, or batch_size, queue_capacity, num_threads or
        num_epochs is not an integer as described (at once; TF 2.15 checks only shuffle
        here). When input_fn is called, as TF: TypeError when x is neither an array nor
        a dict; ValueError for an empty x, an empty dict y, keys in both x and y, or
        arrays of different rows.
    """
    shuffle = check_shuffle(shuffle)
    check_reader_args(batch_size, num_epochs, queue_capacity, num_threads)
    return TableReading(
        fn_name="numpy_input_fn",
        make_table=lambda: numpy_table(x, y),
        batch_size=batch_size,
        num_epochs=num_epochs,
        shuffle=shuffle,
        capacity=queue_capacity,
        min_after_dequeue=int(queue_capacity / 4),
        num_threads=num_threads,
    )


numpy_input_fn = input_fn_face(
    numpy_reading,
    table_input_fn,
    "numpy_input_fn",
    __name__,
    """An input_fn feeding numpy arrays in batches, as TF 2.15's ``numpy_input_fn``.

    The input_fn returns a generator of batches: ``features`` (a dict with x's keys, or
    an array when ``x`` is one) when ``y`` is None, else ``(features, labels)`` (labels
    an array, or a dict with y's keys). Each leaf is ``[rows, ...]`` with the rows of
    ``x[key][i]``, dtypes unchanged. It takes an optional ``config``: the Estimator
    passes its RunConfig, whose ``tf_random_seed`` seeds the shuffling (JAX difference:
    TF's order also depends on its reader threads' timing; here it is reproducible when
    the seed is set, and new entropy each call when not).

    Batches follow TF: rows in order (or shuffled), ``batch_size`` at a time, crossing
    epoch boundaries; with ``num_epochs`` set the generator ends after that many epochs
    and its last batch holds the rows left (the Estimator runs it at its own shape, or
    pads and masks it on the mesh, see ``jaxspec.loop.feeder``); with ``num_epochs=None``
    every batch is full and the input never ends (give train ``steps`` or ``max_steps``).
    Shuffling draws each row from a buffer of ``queue_capacity`` rows (TF's
    RandomShuffleQueue, readers starting at a random row); the ``num_threads`` readers
    interleave.

    Returns:
      ``input_fn(config=None)``, returning the generator of batches.
    """,
)
