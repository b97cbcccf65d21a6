"""``tf.estimator.export``: serving input receivers and export outputs."""

from tensorflow.python.saved_model.model_utils.export_output import EvalOutput

from tf_bridge.export.receivers import (
    ServingInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
)
from tf_bridge.runtime.spec import ClassificationOutput, ExportOutput, PredictOutput, RegressionOutput

__all__ = [
    "ClassificationOutput",
    "EvalOutput",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
]
