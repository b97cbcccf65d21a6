"""Whether the replicas of a TPUEstimator still hold one model after a training loop.

On the mesh each replica runs model_fn on its rows and updates its own copy of the
state; the copies stay equal only when the gradients are reduced across replicas
(``CrossShardOptimizer``, or ``jax.lax.pmean(grads, 'replica')``). Without that,
TPUEstimator's semantics are kept (each replica trains on its own, checkpoints hold
replica 0's copy, as TF's TPUEstimator without CrossShardOptimizer), and this check warns
once per call that the copies differ.

The check is cheap and compiles nothing: it looks at up to ``LEAVES`` floating-point
leaves (the largest whose copy on one device is at most ``MAX_BYTES``, else the
smallest) and copies each device's copy of them to the host (all transfers started at
once; the loop that made the state is waited for, before the next one is dispatched, so
no buffer is read after the next loop may have taken it over). It runs
on the state after the first loop of a call, then every ``every`` loops, and on the final
state when no loop was checked. One process only (several: each would need the others'
devices).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxspec.engine.mesh import num_replicas
from jaxspec.spec.fn_types import State

_log = logging.getLogger("jaxspec")
EVERY = 100  # loops between checks after the first
LEAVES = 4  # leaves compared per check
MAX_BYTES = 1 << 20  # the largest per-device copy of a leaf that is read back


def _chosen_leaves(state: State) -> list[tuple[str, jax.Array]]:
    """Up to ``LEAVES`` named floating-point leaves held on several devices: the largest
    whose per-device copy is at most ``MAX_BYTES``, else the smallest ones."""
    leaves = []
    for path, x in jax.tree_util.tree_flatten_with_path(state)[0]:
        if not isinstance(x, jax.Array) or not jnp.issubdtype(x.dtype, jnp.floating) or not x.size:
            continue
        if len(x.sharding.device_set) > 1:
            nbytes = x.addressable_shards[0].data.nbytes
            leaves.append((nbytes, jax.tree_util.keystr(path) or "<root>", x))
    small = sorted((leaf for leaf in leaves if leaf[0] <= MAX_BYTES), key=lambda leaf: -leaf[0])
    chosen = small[:LEAVES] if small else sorted(leaves, key=lambda leaf: leaf[0])[:LEAVES]
    return [(name, x) for _, name, x in chosen]


class ReplicaCheck:
    """Compares the replicas' copies of the state after training loops (see the module).

    Args:
      mesh: the call's mesh (None or a single replica: the check does nothing).
      every: loops between checks after the first.
    """

    def __init__(self, mesh: Mesh | None, every: int = EVERY) -> None:
        self._on = mesh is not None and num_replicas(mesh) > 1 and jax.process_count() == 1
        self._every = every
        self._loops = 0
        self._checked = False
        self.warned = False

    def after_loop(self, state: State, global_step: int) -> None:
        """``state`` is a loop's output (still valid: call before it goes into the next
        loop); checked after the first loop and every ``every`` loops."""
        if not self._on or self.warned:
            return
        if self._loops % self._every == 0:
            self._check(state, global_step)
        self._loops += 1

    def finish(self, state: State, global_step: int) -> None:
        """The call's final state: checked if no loop was."""
        if self._on and not self.warned and not self._checked:
            self._check(state, global_step)

    def _check(self, state: State, global_step: int) -> None:
        copies = []
        for name, x in _chosen_leaves(state):
            shards = [(str(sh.index), sh.data) for sh in x.addressable_shards]
            for _, data in shards:
                data.copy_to_host_async()  # every transfer under way before the first is read
            copies.append((name, shards))
        self._checked = True
        differ = []
        for name, shards in copies:
            by_index: dict[str, list[np.ndarray]] = {}
            for index, data in shards:  # copies of one slice share its index
                by_index.setdefault(index, []).append(np.asarray(data, np.float32))
            for same in by_index.values():
                scale = max(float(np.abs(c).max()) for c in same) + 1e-30
                if any(float(np.abs(c - same[0]).max()) > 1e-6 * scale for c in same[1:]):
                    differ.append(name)
                    break
        if differ:
            self.warned = True
            more = f", {len(differ)} of the {len(copies)} leaves compared" if len(differ) > 1 else ""
            _log.warning(
                "After the training loop ending at global step %d the replicas' copies of the state differ "
                "(%s%s): each replica updated its copy with its own gradients. TPUEstimator keeps that (as "
                "TF's without CrossShardOptimizer; checkpoints hold replica 0's copy). To train one model, "
                "wrap the optimizer in jaxspec.CrossShardOptimizer or average the gradients with "
                "jax.lax.pmean(grads, 'replica').",
                global_step,
                differ[0],
                more,
            )
