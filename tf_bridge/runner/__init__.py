"""The TensorFlow runner: tf.estimator's Estimator and TPUEstimator (CPU path) for TF1-style
model_fns on TensorFlow >= 2.16, where ``tf.estimator`` no longer exists.

The facades (``estimator``, ``tpu_estimator``) build a ``plan.RunPlan`` per call; ``train``,
``evaluate``, ``predict`` and ``saved_model_export`` run it. Names load on first use.
"""

from __future__ import annotations

from tf_bridge import _module_map

_PUBLIC = {
    "Estimator": "tf_bridge.runner.estimator",
    "TPUEstimator": "tf_bridge.runner.tpu_estimator",
    "WarmStartSettings": "tf_bridge.runner.estimator",
}

__all__ = ["Estimator", "TPUEstimator", "WarmStartSettings"]


__getattr__ = _module_map.lazy_getattr(__name__, _PUBLIC)
