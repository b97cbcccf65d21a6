"""Whether a loop dispatched ahead may take (donate) the state it starts from.

A training loop donates its state (``CompiledLoop``): once loop k+1 is dispatched from
loop k's output state, that state is gone from the devices. A loop dispatched ahead (see
``jaxspec.loop.pipeline``) therefore donates only after a loop whose output state the
host will not read: every hook answers that it does not read ``session.state`` and will
not stop training at that step (a stop keeps the state of the step it was requested
at). The loop asks the hooks (``reads_state_after``, ``may_stop_after``: the hook
protocol in ``jaxspec.spec.hooks``), never their classes. A hook that does not answer
(a user's own SessionRunHook) may do either at any step, so with one of them the loop
ahead keeps the state (``CompiledLoop.dispatch(keep_state=True)``): two states on the
devices. That is done only while a second state is small (``KeepAhead``); a larger state
is not dispatched ahead of such a hook, so the devices hold one state, as a hand donated
loop. A hook that answers that it reads the state at a step (a save due there) is waited
for at that step instead: one state, and no second executable compiled for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax

from jaxspec.spec.hooks import may_stop, reads_state


def state_free_after(hooks: Iterable[Any], step: int) -> bool:
    """Whether no hook will read the state, or stop training, after global step ``step``.

    Args:
      hooks: every hook of the call (the user's, the spec's and the Estimator's own).
      step: the global step a loop ends at.

    Returns:
      True when each hook answers ``reads_state_after(step)`` False and
      ``may_stop_after(step)`` False (a hook that does not answer reads and stops).
    """
    return all(reads_state(h, step) is False and not may_stop(h, step) for h in hooks)


def state_read_at(hooks: Iterable[Any], step: int) -> bool:
    """Whether some hook answers, itself, that it reads the state after ``step`` (not a
    hook that does not answer: that one may read after any step)."""
    return any(reads_state(h, step) is True for h in hooks)


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
