"""TensorFlow bridge: SavedModel export of jaxspec models and serving input receivers.

Importing this package imports TensorFlow; ``import jaxspec`` never does.
"""

from tf_bridge.receivers import (
    ServingInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
)
from tf_bridge.saved_model import export_saved_model

__all__ = [
    "ServingInputReceiver",
    "TensorServingInputReceiver",
    "build_parsing_serving_input_receiver_fn",
    "build_raw_serving_input_receiver_fn",
    "export_saved_model",
]
