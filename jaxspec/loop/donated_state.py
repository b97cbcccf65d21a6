"""Whether a loop dispatched ahead may take (donate) the state it starts from.

A training loop donates its state (``CompiledLoop``): once loop k+1 is dispatched from
loop k's output state, that state is gone from the devices. A loop dispatched ahead (see
``jaxspec.loop.pipeline``) therefore donates only after a loop whose output state the
host will not read: no hook needs ``session.state`` and no hook may stop training at that
step (a stop keeps the state of the step it was requested at). Hooks of unknown kinds (a
user's own SessionRunHook) may do either at any step, so with one of them the loop ahead
keeps the state (``CompiledLoop.dispatch(keep_state=True)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jaxspec.hooks.basic import (
    LoggingTensorHook,
    NanTensorHook,
    ProfilerHook,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from jaxspec.hooks.checkpoint import CheckpointSaverHook

#: jaxspec's hooks that read neither the state nor stop training other than at a step
#: the loops already end at (StopAtStepHook's last step bounds every loop).
_STATE_FREE: tuple[type, ...] = (
    LoggingTensorHook,
    StepCounterHook,
    SummarySaverHook,
    ProfilerHook,
    StopAtStepHook,
)


def state_free_after(hooks: Iterable[Any], step: int, own: tuple[type, ...] = ()) -> bool:
    """Whether no hook will read the state, or stop training, after global step ``step``.

    Args:
      hooks: every hook of the call (the user's, the spec's and the Estimator's own).
      step: the global step a loop ends at.
      own: further hook classes known to be state-free (the train loop's ProgressHook).

    Returns:
      True when each hook is state-free: one of ``_STATE_FREE`` or ``own``, a
      NanTensorHook that fails (an error discards the state anyway), or a
      CheckpointSaverHook whose timer does not trigger at ``step`` (a time trigger that
      elapses after this check is honoured one loop later: the saver defers a save while
      ``session.state`` is None).
    """
    for hook in hooks:
        if isinstance(hook, _STATE_FREE + own):
            continue
        if isinstance(hook, NanTensorHook) and hook.fails:
            continue
        if isinstance(hook, CheckpointSaverHook) and not hook.due_at(step):
            continue
        return False
    return True
