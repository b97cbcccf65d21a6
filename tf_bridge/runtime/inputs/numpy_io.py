"""``numpy_input_fn`` for TF model_fns (``tf.compat.v1.estimator.inputs.numpy_input_fn``):
the face over jaxspec's ``numpy_reading`` that feeds TF1 queues."""

from __future__ import annotations

from jaxspec.inputs.numpy_io import numpy_reading
from jaxspec.inputs.reading import input_fn_face
from tf_bridge.runtime.inputs.queue import queue_input_fn

_DOC = """An input_fn feeding numpy arrays through a TF1 queue, as TF 2.15's ``numpy_input_fn``.

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
batch has ``batch_size`` rows and the input never ends.

Returns:
  ``input_fn()``, returning the batch's tensors.

Raises:
  RuntimeError: input_fn is called while TF executes eagerly (queues need a graph).
"""

numpy_input_fn = input_fn_face(numpy_reading, queue_input_fn, "numpy_input_fn", __name__, _DOC)
