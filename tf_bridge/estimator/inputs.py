"""``tf.compat.v1.estimator.inputs``: ``numpy_input_fn`` and ``pandas_input_fn`` on
tf_bridge (TF 2.15's v1 names; queue-fed input_fns, see ``tf_bridge.runtime.inputs``)."""

from tf_bridge.runtime.inputs import numpy_input_fn, pandas_input_fn

__all__ = ["numpy_input_fn", "pandas_input_fn"]
