"""The TensorFlow runner: tf.estimator's Estimator and TPUEstimator (CPU path) for TF1-style
model_fns on TensorFlow >= 2.16, where ``tf.estimator`` no longer exists.

The facades (``estimator``, ``tpu_estimator``) build a ``plan.TFRunPlan`` per call;
``train``, ``evaluate``, ``predict`` and ``model_fn_saved_model`` run it. Names load on
first use (``__init__.pyi``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
