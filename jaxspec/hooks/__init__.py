"""Standard SessionRunHooks and CheckpointSaverListener, with tf.estimator's names."""

from jaxspec.hooks.basic import (
    FeedFnHook,
    FinalOpsHook,
    LoggingTensorHook,
    NanTensorHook,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from jaxspec.hooks.checkpoint import CheckpointSaverHook, CheckpointSaverListener
from jaxspec.hooks.early_stopping import (
    make_early_stopping_hook,
    read_eval_metrics,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)
from jaxspec.hooks.profiler import ProfilerHook
from jaxspec.hooks.timer import SecondOrStepTimer

__all__ = [
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "FeedFnHook",
    "FinalOpsHook",
    "LoggingTensorHook",
    "NanTensorHook",
    "ProfilerHook",
    "SecondOrStepTimer",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
    "make_early_stopping_hook",
    "read_eval_metrics",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]
