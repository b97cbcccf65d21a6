"""TensorFlow bridge: SavedModel export of jaxspec models and their input receivers.

Importing this package imports TensorFlow; ``import jaxspec`` never does.
"""

from tf_bridge._compat import ExportCompatibilityError
from tf_bridge._modes import ModeExport
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
from tf_bridge.saved_model import export_all_saved_models, export_saved_model

__all__ = [
    "ExportCompatibilityError",
    "ModeExport",
    "ServingInputReceiver",
    "SupervisedInputReceiver",
    "TensorServingInputReceiver",
    "UnsupervisedInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "build_raw_supervised_input_receiver_fn",
    "build_supervised_input_receiver_fn_from_input_fn",
    "export_all_saved_models",
    "export_saved_model",
]
