"""Whether the replicas of a TPUEstimator still hold one model after a training loop.

On the mesh each replica runs model_fn on its rows and updates its own copy of the
state; the copies stay equal only when the gradients are reduced across replicas
(``CrossShardOptimizer``, or ``jax.lax.pmean(grads, 'replica')``). Without that,
TPUEstimator's semantics are kept (each replica trains on its own, checkpoints hold
replica 0's copy, as TF's TPUEstimator without CrossShardOptimizer), and this check warns
once per call that the copies differ.

Leaves no gradient reaches (a TrainState's ``batch_stats``, counters) drift apart even
with the gradients reduced, since each replica computes them from its own rows; the
warning then names what averages them over the replica axis (``nn.BatchNorm(axis_name=)``
or ``lax.pmean``), not the optimizer.

The check is cheap and compiles nothing: it looks at up to ``LEAVES`` floating-point
leaves of each kind, those the optimizer updates and those it does not (the largest
whose copy on one device is at most ``MAX_BYTES``, else the smallest) and copies each device's copy of them to the host (all transfers started at
once; the loop that made the state is waited for, before the next one is dispatched, so
no buffer is read after the next loop may have taken it over). It runs
on the state after the first loop of a call, then every ``every`` loops, and on the final
state when no loop was checked. One process only (several: each would need the others'
devices).
"""

from __future__ import annotations

import logging
from typing import Any

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


GRADIENT_FIELDS = ("params", "opt_state")  # what an optimizer step updates in a TrainState


def _first_key(path: Any) -> str | None:
    entry = path[0] if path else None
    for attr in ("name", "key"):
        if entry is not None and hasattr(entry, attr):
            return str(getattr(entry, attr))
    return None


def reached_by_gradients(state: State, path: Any) -> bool:
    """Whether the optimizer updates the leaf at ``path``: False only for a state with a
    ``params`` field (a flax TrainState, a dict) and a leaf outside ``params`` and
    ``opt_state`` (``batch_stats``, counters), or any leaf under ``batch_stats``."""
    if any(getattr(k, "key", getattr(k, "name", None)) == "batch_stats" for k in path):
        return False
    has_params = hasattr(state, "params") or (isinstance(state, dict) and "params" in state)
    return not has_params or _first_key(path) in GRADIENT_FIELDS


def _chosen_leaves(state: State) -> list[tuple[str, jax.Array, bool]]:
    """Up to ``LEAVES`` named floating-point leaves held on several devices that the
    optimizer updates, and up to ``LEAVES`` that it does not (batch statistics): in each
    kind the largest whose per-device copy is at most ``MAX_BYTES``, else the smallest.
    Each comes with whether gradients reach it."""
    kinds: dict[bool, list[tuple[int, str, jax.Array]]] = {True: [], False: []}
    for path, x in jax.tree_util.tree_flatten_with_path(state)[0]:
        if not isinstance(x, jax.Array) or not jnp.issubdtype(x.dtype, jnp.floating) or not x.size:
            continue
        if len(x.sharding.device_set) > 1:
            nbytes = x.addressable_shards[0].data.nbytes
            kinds[reached_by_gradients(state, path)].append(
                (nbytes, jax.tree_util.keystr(path) or "<root>", x)
            )
    out = []
    for gradient, leaves in kinds.items():
        small = sorted((leaf for leaf in leaves if leaf[0] <= MAX_BYTES), key=lambda leaf: -leaf[0])
        chosen = small[:LEAVES] if small else sorted(leaves, key=lambda leaf: leaf[0])[:LEAVES]
        out += [(name, x, gradient) for _, name, x in chosen]
    return out


def _advice(differ: list[tuple[str, bool]], compared: int, global_step: int, axis: str) -> str:
    """The warning: which leaves differ and, per kind, what averages them."""
    names = [name for name, _ in differ]
    more = f", {len(names)} of the {compared} leaves compared" if len(names) > 1 else ""
    text = (
        f"After the training loop ending at global step {global_step} the replicas' copies of the "
        f"state differ ({', '.join(names[:3])}{more})."
    )
    if any(gradient for _, gradient in differ):
        text += (
            " Each replica updated its copy with its own gradients. TPUEstimator keeps that (as TF's "
            "without CrossShardOptimizer; checkpoints hold replica 0's copy). To train one model, wrap "
            f"the optimizer in jaxspec.CrossShardOptimizer or average the gradients with "
            f"jax.lax.pmean(grads, {axis!r})."
        )
    stats = [name for name, gradient in differ if not gradient]
    if stats:
        text += (
            f" No gradient reaches {stats[0]}{' and the like' if len(stats) > 1 else ''} (batch "
            "statistics, counters), so no optimizer wrapper averages it: each replica computed it from "
            f"its own rows. Average it over the replica axis where model_fn computes it: "
            f"flax.linen.BatchNorm(axis_name={axis!r}) for batch statistics, or "
            f"jax.lax.pmean(value, {axis!r}) for a value of your own (checkpoints hold replica 0's copy)."
        )
    return text


class ReplicaCheck:
    """Compares the replicas' copies of the state after training loops (see the module).

    Args:
      mesh: the call's mesh (None or a single replica: the check does nothing).
      every: loops between checks after the first.
    """

    def __init__(self, mesh: Mesh | None, every: int = EVERY) -> None:
        self._on = mesh is not None and num_replicas(mesh) > 1 and jax.process_count() == 1
        self._axis = mesh.axis_names[0] if mesh is not None else "replica"  # the replica axis comes first
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
        for name, x, gradient in _chosen_leaves(state):
            shards = [(str(sh.index), sh.data) for sh in x.addressable_shards]
            for _, data in shards:
                data.copy_to_host_async()  # every transfer under way before the first is read
            copies.append((name, shards, gradient))
        self._checked = True
        differ = []
        for name, shards, gradient in copies:
            by_index: dict[str, list[np.ndarray]] = {}
            for index, data in shards:  # copies of one slice share its index
                by_index.setdefault(index, []).append(np.asarray(data, np.float32))
            for same in by_index.values():
                scale = max(float(np.abs(c).max()) for c in same) + 1e-30
                if any(float(np.abs(c - same[0]).max()) > 1e-6 * scale for c in same[1:]):
                    differ.append((name, gradient))
                    break
        if differ:
            self.warned = True
            _log.warning("%s", _advice(differ, len(copies), global_step, self._axis))
