"""``tf.compat.v1.estimator.inputs`` for jaxspec: input_fns that read numpy arrays
(``numpy_input_fn``) or a pandas DataFrame (``pandas_input_fn``, needs the ``pandas``
extra) with TF 2.15's arguments, defaults, batching, epochs and shuffling. Each returns
a plain input_fn whose result is a generator of numpy batches.
"""

from jaxspec.inputs.numpy_io import numpy_input_fn
from jaxspec.inputs.pandas_io import pandas_input_fn

__all__ = ["numpy_input_fn", "pandas_input_fn"]
