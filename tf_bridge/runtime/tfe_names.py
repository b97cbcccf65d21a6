"""Names ``tensorflow_estimator``'s modules had that no tf_bridge module defines under that
name: served by ``tf_bridge.install()``'s module paths (``tf_bridge.runtime.import_compat``).

- ``EstimatorV2``: TF 2.15's ``estimator`` module kept the v2 class under this name too;
  tf_bridge has one Estimator for both (docs/decisions.md, "TF1 forms in tf_bridge").
- ``EvalOutput``, ``TrainOutput``: TensorFlow's own classes (``tf.estimator.export`` and
  ``export_output`` had them), as the other export outputs in ``tf_bridge.runtime.spec``.
- ``VocabInfo``: TensorFlow's own warm-start class, which TF 2.15's ``estimator`` module
  re-exported beside ``WarmStartSettings`` (``tf.estimator.VocabInfo`` is the same class).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.saved_model.model_utils import export_output as _tf_export_output

from tf_bridge.runtime.runner.estimator import Estimator

EstimatorV2 = Estimator
VocabInfo = tf.compat.v1.train.VocabInfo
EvalOutput = _tf_export_output.EvalOutput
TrainOutput = _tf_export_output.TrainOutput

__all__ = ["EstimatorV2", "EvalOutput", "TrainOutput", "VocabInfo"]
