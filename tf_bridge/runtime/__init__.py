"""The runtime wing of tf_bridge: tf.estimator for TF1-style model_fns on TensorFlow >= 2.16.

``runner`` (Estimator, TPUEstimator's CPU path), ``heads``, ``canned``, ``npu``, the TF
specs (``spec``), configs (``run_config``, ``cluster_settings``), hooks, and
``train_and_evaluate`` (``training``); ``import_compat`` makes tf.estimator's import paths
lead here. It may import the export wing (``tf_bridge.export``), never the reverse.
Subpackages load on first use (``__init__.pyi``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
