"""TensorFlow bridge, in two wings.

- The export wing, ``tf_bridge.export``: SavedModel export of jaxspec models (jax2tf),
  serving input receivers, export outputs and the JAX/TF compatibility guard. It is the
  only part jaxspec imports.
- The runtime wing, ``tf_bridge.runtime``: tf.estimator for TF1-style model_fns on
  TensorFlow >= 2.16, where ``tf.estimator`` is gone: ``Estimator``, ``TPUEstimator``
  (CPU path), ``NPUEstimator``, their specs and configs, the heads and canned
  estimators, and ``train_and_evaluate`` with its specs and exporters.

``tf_bridge.estimator`` is tf.estimator's namespace on both. ``tf_bridge.install()`` (or
``python -m tf_bridge script.py``) makes unmodified tf.estimator code find all of it where
it looked before.

The public names below this package are those of ``__init__.pyi`` (type checkers and IDEs
read it); each loads when first used. Importing this package imports TensorFlow (without
its C++ start-up INFO lines) and nothing else of tf_bridge; ``import jaxspec`` never
imports TensorFlow.
"""

from __future__ import annotations

import lazy_loader

from tf_bridge._quiet import import_tensorflow

import_tensorflow()

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
