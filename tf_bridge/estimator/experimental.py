"""``tf.estimator.experimental``'s names that tf_bridge implements."""

from tf_bridge.hooks import (
    InMemoryEvaluatorHook,
    make_early_stopping_hook,
    make_stop_at_checkpoint_step_hook,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)
from tf_bridge.receivers import build_raw_supervised_input_receiver_fn

__all__ = [
    "InMemoryEvaluatorHook",
    "build_raw_supervised_input_receiver_fn",
    "make_early_stopping_hook",
    "make_stop_at_checkpoint_step_hook",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]
