"""``pandas_input_fn`` for TF model_fns (``tf.compat.v1.estimator.inputs.pandas_input_fn``):
the face over jaxspec's ``pandas_reading`` that feeds TF1 queues."""

from __future__ import annotations

from jaxspec.inputs.pandas_io import pandas_reading
from jaxspec.inputs.reading import input_fn_face
from tf_bridge.runtime.inputs.queue import queue_input_fn

_DOC = """An input_fn feeding a pandas DataFrame through a TF1 queue, as TF 2.15's
``pandas_input_fn``.

The input_fn returns one dequeued batch: ``features``, a dict from x's column names
(in x's order) to ``[batch]`` tensors, when ``y`` is None, else
``(features, labels)``: a tensor for a Series ``y``, or a dict keyed by a DataFrame
``y``'s column names. Text columns become ``tf.string`` (TF 2.15 refused them with a
TypeError). Queue, batching, epochs, shuffling, threads and the end of the input are
those of ``tf_bridge.estimator.inputs.numpy_input_fn``.

Returns:
  ``input_fn()``, returning the batch's tensors.

Raises:
  RuntimeError: input_fn is called while TF executes eagerly (queues need a graph).
"""

pandas_input_fn = input_fn_face(pandas_reading, queue_input_fn, "pandas_input_fn", __name__, _DOC)
