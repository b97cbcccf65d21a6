"""``tf.compat.v1.estimator.inputs`` on TF >= 2.16: ``numpy_input_fn`` and
``pandas_input_fn``, whose input_fns return tensors fed by TF1 queue runners
(``queue``), as in TF 2.15."""

from tf_bridge.runtime.inputs.numpy_io import numpy_input_fn
from tf_bridge.runtime.inputs.pandas_io import pandas_input_fn

__all__ = ["numpy_input_fn", "pandas_input_fn"]
