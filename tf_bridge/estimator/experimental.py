"""``tf.estimator.experimental``'s names that tf_bridge implements."""

from tf_bridge.export.receivers import build_raw_supervised_input_receiver_fn
from tf_bridge.runtime.hooks import (
    InMemoryEvaluatorHook,
    make_early_stopping_hook,
    make_stop_at_checkpoint_step_hook,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)

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
