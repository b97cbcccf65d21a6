"""Whether a loop dispatched ahead may take (donate) the state it starts from.

A training loop donates its state (``CompiledLoop``): once loop k+1 is dispatched from
loop k's output state, that state is gone from the devices. A loop dispatched ahead (see
``jaxspec.loop.pipeline``) therefore donates only after a loop whose output state the
host will not read: no hook needs ``session.state`` and no hook may stop training at that
step (a stop keeps the state of the step it was requested at). Hooks of unknown kinds (a
user's own SessionRunHook) may do either at any step, so with one of them the loop ahead
keeps the state (``CompiledLoop.dispatch(keep_state=True)``): two states on the devices.
That is done only while a second state is small (``KeepAhead``); a larger state is not
dispatched ahead of such a hook, so the devices hold one state, as a hand donated loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax

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


#: Without a memory size from the device (CPU): the largest state, in bytes per device,
#: of which a loop dispatched ahead may hold a second copy.
KEEP_AHEAD_MAX_BYTES = 32 << 20
#: With a device's memory size (``memory_stats()['bytes_limit']``, GPU/TPU): the largest
#: fraction of it that a second copy of the state may take.
KEEP_AHEAD_MAX_FRACTION = 1 / 16


def state_bytes_per_device(state: Any) -> int:
    """Bytes of ``state`` on its most loaded device (each leaf's shard shape x itemsize;
    a replicated leaf counts whole on every device)."""
    per_device: dict[Any, int] = {}
    for leaf in jax.tree.leaves(state):
        if not isinstance(leaf, jax.Array):
            continue
        for shard in leaf.addressable_shards:
            per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
    return max(per_device.values(), default=0)


class KeepAhead:
    """Whether a loop dispatched ahead of a hook that may read its state may keep that
    state (a second copy on the devices): the state per device is at most
    ``KEEP_AHEAD_MAX_FRACTION`` of the device's memory, or ``KEEP_AHEAD_MAX_BYTES`` where
    the device does not report its memory. Decided once per train call (the state's
    layout does not change within it)."""

    def __init__(self) -> None:
        self._answer: bool | None = None

    def second_state(self, state: Any) -> bool:
        """True when a second copy of ``state`` (a pytree of arrays) is affordable."""
        if self._answer is None:
            limit = KEEP_AHEAD_MAX_BYTES
            leaves = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
            stats = leaves[0].addressable_shards[0].device.memory_stats() if leaves else None
            if stats and stats.get("bytes_limit"):
                limit = int(stats["bytes_limit"] * KEEP_AHEAD_MAX_FRACTION)
            self._answer = state_bytes_per_device(state) <= limit
        return self._answer
