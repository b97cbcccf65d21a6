"""Standard SessionRunHooks and CheckpointSaverListener, with tf.estimator's names."""

from jaxspec.hooks.basic import (
    FeedFnHook,
    FinalOpsHook,
    LoggingTensorHook,
    NanTensorHook,
    ProfilerHook,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from jaxspec.hooks.checkpoint import CheckpointSaverHook, CheckpointSaverListener
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
]
