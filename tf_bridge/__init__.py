"""TensorFlow bridge: SavedModel export of jaxspec models and their input receivers.

It also runs TF1-style model_fns on TensorFlow >= 2.16, where ``tf.estimator`` is gone:
``Estimator``, ``TPUEstimator`` (CPU path), ``NPUEstimator`` and their specs and configs
(``tf_bridge.runner``, ``tf_bridge.npu``, ``tf_bridge.spec``), ``train_and_evaluate`` with
its specs and exporters (``tf_bridge.training``), and ``tf.estimator``'s namespace as
``tf_bridge.estimator``. ``tf_bridge.install()`` (or ``python -m tf_bridge script.py``)
makes unmodified tf.estimator code find all of it where it looked before.

Importing this package imports TensorFlow (without its C++ start-up INFO lines); each
submodule and public name loads when first used. ``import jaxspec`` never imports
TensorFlow.
"""

from __future__ import annotations

from tf_bridge import _module_map
from tf_bridge._quiet import import_tensorflow

import_tensorflow()
_module_map.register(_module_map.MOVED_FINDER)

# Public name -> the module defining it (loaded on first use).
_PUBLIC = {
    "ExportCompatibilityError": "tf_bridge._compat",
    "ModeExport": "tf_bridge._modes",
    "InputPipelineConfig": "tf_bridge.run_config",
    "RunConfig": "tf_bridge.run_config",
    "TPUConfig": "tf_bridge.run_config",
    "ExponentialUpdateLossScaleManager": "tf_bridge.npu",
    "FixedLossScaleManager": "tf_bridge.npu",
    "NPUDistributedOptimizer": "tf_bridge.npu",
    "NPUEstimator": "tf_bridge.npu",
    "NPULossScaleOptimizer": "tf_bridge.npu",
    "NPUOptimizer": "tf_bridge.npu",
    "NPURunConfig": "tf_bridge.npu",
    "ServingInputReceiver": "tf_bridge.receivers",
    "SupervisedInputReceiver": "tf_bridge.receivers",
    "TensorServingInputReceiver": "tf_bridge.receivers",
    "UnsupervisedInputReceiver": "tf_bridge.receivers",
    "build_parsing_serving_input_receiver_fn": "tf_bridge.receivers",
    "build_raw_serving_input_receiver_fn": "tf_bridge.receivers",
    "build_raw_supervised_input_receiver_fn": "tf_bridge.receivers",
    "build_supervised_input_receiver_fn_from_input_fn": "tf_bridge.receivers",
    "Estimator": "tf_bridge.runner.estimator",
    "TPUEstimator": "tf_bridge.runner.tpu_estimator",
    "WarmStartSettings": "tf_bridge.runner.estimator",
    "export_outputs_from_tf": "tf_bridge.export_outputs",
    "export_outputs_to_tf": "tf_bridge.export_outputs",
    "export_all_saved_models": "tf_bridge.saved_model",
    "export_saved_model": "tf_bridge.saved_model",
    "ClassificationOutput": "tf_bridge.spec",
    "EstimatorSpec": "tf_bridge.spec",
    "ExportOutput": "tf_bridge.spec",
    "ModeKeys": "tf_bridge.spec",
    "NPUEstimatorSpec": "tf_bridge.spec",
    "PredictOutput": "tf_bridge.spec",
    "RegressionOutput": "tf_bridge.spec",
    "TPUEstimatorSpec": "tf_bridge.spec",
    "BestExporter": "tf_bridge.training",
    "EvalSpec": "tf_bridge.training",
    "Exporter": "tf_bridge.training",
    "FinalExporter": "tf_bridge.training",
    "LatestExporter": "tf_bridge.training",
    "TrainSpec": "tf_bridge.training",
    "train_and_evaluate": "tf_bridge.training",
    "install": "tf_bridge.import_compat",
}

__all__ = ["estimator", *sorted(_PUBLIC)]


__getattr__ = _module_map.lazy_getattr(__name__, _PUBLIC)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
