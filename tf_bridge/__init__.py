"""TensorFlow bridge: SavedModel export of jaxspec models and their input receivers.

It also runs TF1-style model_fns on TensorFlow >= 2.16, where ``tf.estimator`` is gone:
``Estimator``, ``TPUEstimator`` (CPU path), ``NPUEstimator`` and their specs and configs
(``tf_bridge.runner``, ``tf_bridge.npu``, ``tf_bridge.spec``), ``train_and_evaluate`` with
its specs and exporters (``tf_bridge.training``), and ``tf.estimator``'s namespace as
``tf_bridge.estimator``.

Importing this package imports TensorFlow; ``import jaxspec`` never does.
"""

from tf_bridge import estimator
from tf_bridge._compat import ExportCompatibilityError
from tf_bridge._modes import ModeExport
from tf_bridge.config import InputPipelineConfig, RunConfig, TPUConfig
from tf_bridge.npu import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
    NPUDistributedOptimizer,
    NPUEstimator,
    NPULossScaleOptimizer,
    NPUOptimizer,
    NPURunConfig,
)
from tf_bridge.receivers import (
    ServingInputReceiver,
    SupervisedInputReceiver,
    TensorServingInputReceiver,
    UnsupervisedInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    build_raw_supervised_input_receiver_fn,
    build_supervised_input_receiver_fn_from_input_fn,
)
from tf_bridge.runner import Estimator, TPUEstimator, WarmStartSettings
from tf_bridge.runner.convert import export_outputs_from_tf, export_outputs_to_tf
from tf_bridge.saved_model import export_all_saved_models, export_saved_model
from tf_bridge.spec import (
    ClassificationOutput,
    EstimatorSpec,
    ExportOutput,
    ModeKeys,
    NPUEstimatorSpec,
    PredictOutput,
    RegressionOutput,
    TPUEstimatorSpec,
)
from tf_bridge.training import (
    BestExporter,
    EvalSpec,
    Exporter,
    FinalExporter,
    LatestExporter,
    TrainSpec,
    train_and_evaluate,
)

__all__ = [
    "estimator",
    "train_and_evaluate",
    "TrainSpec",
    "LatestExporter",
    "FinalExporter",
    "Exporter",
    "EvalSpec",
    "BestExporter",
    "ClassificationOutput",
    "Estimator",
    "EstimatorSpec",
    "ExponentialUpdateLossScaleManager",
    "ExportCompatibilityError",
    "ExportOutput",
    "FixedLossScaleManager",
    "InputPipelineConfig",
    "ModeExport",
    "ModeKeys",
    "NPUDistributedOptimizer",
    "NPUEstimator",
    "NPUEstimatorSpec",
    "NPULossScaleOptimizer",
    "NPUOptimizer",
    "NPURunConfig",
    "PredictOutput",
    "RegressionOutput",
    "RunConfig",
    "ServingInputReceiver",
    "SupervisedInputReceiver",
    "TPUConfig",
    "TPUEstimator",
    "TPUEstimatorSpec",
    "TensorServingInputReceiver",
    "UnsupervisedInputReceiver",
    "WarmStartSettings",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "build_raw_supervised_input_receiver_fn",
    "build_supervised_input_receiver_fn_from_input_fn",
    "export_all_saved_models",
    "export_outputs_from_tf",
    "export_outputs_to_tf",
    "export_saved_model",
]
