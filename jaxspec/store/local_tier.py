"""A node-local checkpoint tier ("emergency checkpoints") next to the model_dir's.

With ``RunConfig(local_checkpoint_dir=D, local_save_checkpoints_steps=N)`` training also
saves every N global steps to node-local storage, each process its own copy of the state
(``D/process_<i>/checkpoints/<global_step>``, the same layout, integrity records and
input position file as the model_dir's), and keeps the newest ``LOCAL_KEEP``. The
model_dir keeps its ``save_checkpoints_steps`` / ``_secs`` and the final step.

A resumed ``train`` takes the newest intact checkpoint of the two tiers: a local step
only when every process holds it intact (an all-gather of each process's steps), else
the model_dir's newest. ``latest_checkpoint()``, evaluation and prediction read the
model_dir only: a local checkpoint is this node's, not the cluster's.

Orbax's experimental emergency CheckpointManager is not used: with one replica slice
(a one-process job) it writes no local checkpoint at all, it needs a mesh whose replica
axis spans slices, and it has no room for the integrity records and input position
files every jaxspec checkpoint carries. Here each process runs a plain Orbax
CheckpointManager of its own (``CheckpointStore(process_local=True)``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxspec.store import paths
from jaxspec.store.checkpoints import CheckpointStore

_log = logging.getLogger("jaxspec")

#: Local checkpoints kept per process: the newest and the one before it, so that a save
#: cut by a kill (never committed) or a damaged newest one still leaves one to resume.
LOCAL_KEEP = 2
_GATHERED = 8  # steps per process compared in the agreement (fixed size for the all-gather)


def local_value(x: Any) -> Any:
    """One state leaf as this process saves it alone (a PRNG key as its key data), or
    None when this process does not hold every index of it (a leaf split over the
    devices of several processes)."""
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
        return x
    key = lambda index: tuple((s.start, s.stop, s.step) for s in index)  # noqa: E731
    every = {key(i) for i in x.sharding.devices_indices_map(x.shape).values()}
    here = {key(i) for i in x.sharding.addressable_devices_indices_map(x.shape).values()}
    return x if every <= here else None


def _put(value: np.ndarray, target: Any) -> Any:
    """``value`` (numpy) as a jax.Array of ``target``'s sharding (a ShapeDtypeStruct),
    each device's shard cut from this process's copy: no collective."""
    key = jax.dtypes.issubdtype(target.dtype, jax.dtypes.prng_key)
    sharding = getattr(target, "sharding", None) or jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    if key:
        impl = (
            jax.random.key_impl(jax.random.key(0))
            if not hasattr(target.dtype, "_impl")
            else target.dtype._impl
        )
        data = jax.make_array_from_callback(value.shape, _data_sharding(sharding, value), lambda i: value[i])
        return jax.random.wrap_key_data(data, impl=impl)
    return jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])


def _data_sharding(sharding: Any, value: np.ndarray) -> Any:
    """The sharding of a key array's data: its trailing axis (the key words) unsplit."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec) + (None,) * (value.ndim - len(sharding.spec))
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec))
    return sharding


class LocalTier:
    """This process's node-local checkpoints: ``local_checkpoint_dir/process_<i>``.

    Args:
      local_dir: RunConfig's ``local_checkpoint_dir`` (a local path).
      every_steps: RunConfig's ``local_save_checkpoints_steps`` (steps, >= 1).
    """

    def __init__(self, local_dir: str, every_steps: int) -> None:
        self.root = paths.absolute(local_dir)
        self.every_steps = int(every_steps)
        self.store = CheckpointStore(
            paths.join(self.root, f"process_{jax.process_index()}"), LOCAL_KEEP, process_local=True
        )
        self.directory = self.store.directory
        self._unsaveable: str | None = None  # a leaf this process does not hold whole

    def due_at(self, step: int) -> bool:
        """Whether a local save is due at global step ``step`` (a multiple of N)."""
        return step > 0 and step % self.every_steps == 0

    def next_step(self, global_step: int) -> int:
        """The first local saving step after ``global_step``."""
        return (global_step // self.every_steps + 1) * self.every_steps

    def save(self, step: int, state: Any, extras: Mapping[str, bytes] | None = None) -> bool:
        """Start saving this process's copy of ``state`` as the local checkpoint of
        ``step`` (asynchronous; the host copy is made before this returns), with the
        files ``extras``. False when no save started: ``step`` is saved already, or a
        leaf is split over several processes' devices (warned once; the model_dir still
        gets its checkpoints)."""
        if self._unsaveable is not None:
            return False
        named = jax.tree_util.tree_flatten_with_path(state)[0]
        host = [local_value(x) for _, x in named]
        missing = [jax.tree_util.keystr(p) for (p, _), v in zip(named, host, strict=True) if v is None]
        if missing:
            self._unsaveable = missing[0]
            _log.warning(
                "The local checkpoint tier %s is off: state leaf %s is split over the devices of several "
                "processes, so no process holds it whole; checkpoints go to the model_dir only.",
                self.root,
                missing[0],
            )
            return False
        tree = jax.tree.unflatten(jax.tree.structure(state), host)
        return self.store.save(step, tree, extras=extras) is not None

    def intact_steps(self) -> list[int]:
        """This process's intact local steps, newest first (a damaged one is named in a
        warning and left out)."""
        self.store.refresh()
        return [s for s in reversed(self.store.all_steps()) if self.store.damage(s) is None]

    def resume_step(self, model_dir_step: int | None) -> int | None:
        """The local step to resume from: the newest one every process holds intact and
        that is newer than ``model_dir_step``, or None (resume from the model_dir). Local
        steps newer than the step resumed from are deleted (training writes them again).
        Every process calls it together (one all-gather).

        Logs one line naming the tier when it resumes from it, one when this process's
        tier is empty or missing (a new node), and one when the processes hold no common
        step newer than the model_dir's."""
        own = self.intact_steps()
        held = _steps_everywhere(own)
        newer = [s for s in held if model_dir_step is None or s > model_dir_step]
        chosen = max(newer) if newer else None
        if not own and model_dir_step is not None:
            _log.info(
                "The local checkpoint tier %s holds no checkpoint (a new node?): resuming from the "
                "model_dir's checkpoint at global step %d.",
                self.directory,
                model_dir_step,
            )
        elif own and chosen is None and own[0] > (model_dir_step if model_dir_step is not None else -1):
            _log.info(
                "Local checkpoint at global step %d of %s not used: %s; resuming from the model_dir.",
                own[0],
                self.directory,
                "not every process holds it" if jax.process_count() > 1 else "it is older",
            )
        if chosen is not None:
            _log.info(
                "Resuming from the local checkpoint tier %s at global step %d (the model_dir's newest "
                "is %s).",
                self.directory,
                chosen,
                "none" if model_dir_step is None else f"global step {model_dir_step}",
            )
        self.discard_after(chosen if chosen is not None else model_dir_step)
        return chosen

    def discard_after(self, step: int | None) -> None:
        """Delete the local checkpoints newer than ``step`` (all with None), damaged ones
        included: training will save those steps again, and Orbax saves no step at or
        below its newest."""
        for s in self.store.all_steps():
            if step is None or s > step:
                paths.rmtree(self.store.path(s))
        self.store.refresh()

    def restore(self, step: int, target: Any) -> Any:
        """The local checkpoint of ``step`` in ``target``'s tree, shapes, dtypes and
        shardings (ShapeDtypeStructs), each device's shards cut from this process's copy.

        Raises:
          DataLossError: a file of it cannot be read.
        """

        def saved_form(t: Any) -> np.ndarray:  # what ``save`` wrote for a leaf of this form
            if jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key):
                t = jax.eval_shape(jax.random.key_data, t)
            return np.zeros(t.shape, t.dtype)

        host = self.store.restore_numpy(step, jax.tree.map(saved_form, target))
        return jax.tree.map(lambda v, t: _put(np.asarray(v), t), host, target)


def _steps_everywhere(own: list[int]) -> list[int]:
    """The steps of ``own`` (this process's, newest first) that every process holds."""
    if jax.process_count() == 1:
        return list(own)
    from jax.experimental import multihost_utils

    row = np.full((_GATHERED,), -1, np.int64)
    row[: min(len(own), _GATHERED)] = own[:_GATHERED]
    gathered = np.asarray(multihost_utils.process_allgather(row)).reshape(-1, _GATHERED)
    common = set.intersection(*({int(s) for s in r if s >= 0} for r in gathered))
    return sorted(common, reverse=True)


class TieredCheckpointStore(CheckpointStore):
    """The model_dir's CheckpointStore with a node-local tier (``local_tier``): what
    training resumes from may be a local checkpoint (``resume_step``); everything else
    (``latest_step``, ``read``, evaluation) reads the model_dir only.

    Args:
      model_dir, keep_checkpoint_max, keep_checkpoint_every_n_hours: as CheckpointStore's.
      local_dir, local_every_steps: RunConfig's ``local_checkpoint_dir`` and
        ``local_save_checkpoints_steps``.
    """

    def __init__(
        self,
        model_dir: str,
        keep_checkpoint_max: int | None,
        keep_checkpoint_every_n_hours: float | None,
        local_dir: str,
        local_every_steps: int,
    ) -> None:
        super().__init__(model_dir, keep_checkpoint_max, keep_checkpoint_every_n_hours)
        self._local = LocalTier(local_dir, local_every_steps)
        self._resumed_local: int | None = None  # the local step the current train resumes from

    @property
    def local_tier(self) -> LocalTier:
        """The node-local tier."""
        return self._local

    def set_aside_damaged(self) -> int | None:
        """As CheckpointStore's, then the step training resumes from across both tiers
        (``LocalTier.resume_step``), which is returned."""
        latest = super().set_aside_damaged()
        self._resumed_local = self._local.resume_step(latest)
        return self._resumed_local if self._resumed_local is not None else latest

    def resume_step(self) -> int | None:
        """The step ``set_aside_damaged`` chose when it was the local tier's, else the
        model_dir's newest intact one."""
        if self._resumed_local is not None:
            return self._resumed_local
        return super().resume_step()

    def save(
        self, step: int, state: Any, extras: Mapping[str, bytes] | None = None, force: bool = True
    ) -> Any:
        """As CheckpointStore's, except the local step training resumed from, without
        extras: the saver's checkpoint of the step it starts from, which the local tier
        holds already (with its input position, which the model_dir's copy would lack)."""
        if not extras and self._from_local(step):
            return None
        return super().save(step, state, extras=extras, force=force)

    def _from_local(self, step: int) -> bool:
        return step == self._resumed_local and step not in self.all_steps()

    def restore(self, step: int, target: Any) -> Any:
        """As CheckpointStore's; the local step being resumed comes from the local tier."""
        if self._from_local(step):
            return self._local.restore(step, target)
        return super().restore(step, target)

    def read_extra(self, step: int, name: str) -> bytes | None:
        """As CheckpointStore's (the input position); of the local tier for the local step
        being resumed."""
        if self._from_local(step):
            return self._local.store.read_extra(step, name)
        return super().read_extra(step, name)

    def wait(self) -> None:
        """Block until the pending saves of both tiers are complete."""
        super().wait()
        self._local.store.wait()

    def close(self) -> None:
        """Finish pending saves of both tiers and release their managers."""
        super().close()
        self._local.store.close()
