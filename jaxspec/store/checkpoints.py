"""Checkpoints in model_dir through Orbax's CheckpointManager (atomic, async, keep N)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import gc
import logging
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxspec._trees import named_leaves
from jaxspec.errors import DataLossError
from jaxspec.store import checkpoint_integrity as integrity
from jaxspec.store import paths
from jaxspec.store import process_local as by_itself

_log = logging.getLogger("jaxspec")
CHECKPOINT_SUBDIR = "checkpoints"
EMPTY_STATE_KEY = "__empty_state__"  # what a checkpoint of a state with no leaves holds


def _replica_zero(x: Any) -> Any:
    """A mesh array with, for each index, the shard of replica 0 (``replica_id == 0``) on
    every device that holds that index."""
    if not isinstance(x, jax.Array) or len(x.addressable_shards) == 1 or not x.is_fully_addressable:
        return x  # one copy; or several processes, where replica 0's shards are not all here
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # a key's shards index its key data
        return jax.random.wrap_key_data(_replica_zero(jax.random.key_data(x)), impl=jax.random.key_impl(x))
    key = lambda index: tuple((s.start, s.stop, s.step) for s in index)  # noqa: E731
    saved = {key(s.index): s.data for s in x.addressable_shards if s.replica_id == 0}
    return jax.make_array_from_callback(x.shape, x.sharding, lambda index: saved[key(index)])


def as_saved(state: Any) -> Any:
    """``state`` as a checkpoint holds it: every leaf's copies equal to replica 0's, as
    TPUEstimator saved replica 0's variables. Replicas meant to hold equal copies can
    differ (a model_fn without CrossShardOptimizer trains each on its own rows); Orbax
    writes the chunks of a replicated array from several replicas, so the state is made
    consistent before a save, and a state kept in memory equals what a restore gives."""
    return jax.tree.map(_replica_zero, state)


#: Leaves of at most this many bytes are handed to Orbax as numpy copies; larger ones as
#: device arrays (see ``_one_copy``).
NUMPY_HANDOVER_MAX_BYTES = 1 << 20


def _one_copy(x: Any) -> Any:
    """What Orbax is handed for one leaf whose replicas are consistent, so that a
    save makes at most one host copy of the state and never gathers a sharded leaf.

    * A fully replicated leaf of this process of more than ``NUMPY_HANDOVER_MAX_BYTES``:
      replica 0's shard, a single-device ``jax.Array`` (no copy). Orbax copies it to the
      host itself, once, before its save returns (on CPU it reads the buffer in place), so
      the device buffer may be donated afterwards.
    * A smaller one: a numpy copy of replica 0's shard. Orbax's numpy path skips the
      device-array bookkeeping, which dominates a small leaf's save (20 leaves of 16 KiB
      on 8 devices: 77 ms against 180 ms); its own copy of a small leaf costs little.
    * Anything else (a sharded leaf, several processes, PRNG keys): as it is; Orbax
      writes each process's own shards from their devices.
    """
    if (
        not isinstance(x, jax.Array)
        or not x.is_fully_addressable
        or not x.is_fully_replicated
        or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    ):
        return x
    shard = next(s for s in x.addressable_shards if s.replica_id == 0).data
    if x.nbytes > NUMPY_HANDOVER_MAX_BYTES:
        return shard
    return np.array(shard, copy=True)  # a copy: the device buffer may be donated next


def _numpy(x: Any) -> np.ndarray:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def checkpoint_dir(model_dir: str) -> str:
    """Where the checkpoints of ``model_dir`` live: ``model_dir/checkpoints/<global_step>``
    (a local ``model_dir`` made absolute; a URL such as ``gs://bucket/run`` kept)."""
    return paths.join(paths.absolute(model_dir), CHECKPOINT_SUBDIR)


def _for_orbax(x: Any) -> Any:
    """One leaf as ``save`` hands it to Orbax: ``_one_copy`` of it, made consistent first
    (``_replica_zero``) only when it is replicated over some mesh axes and sharded over
    others (Orbax may write such an index from several replicas, which can differ). A
    fully replicated leaf goes as replica 0's shard and a sharded one as it is: neither
    gets a second device copy."""
    if (
        isinstance(x, jax.Array)
        and x.is_fully_addressable
        and not x.is_fully_replicated
        and any(s.replica_id > 0 for s in x.addressable_shards)
    ):
        x = _replica_zero(x)
    return _one_copy(x)


@dataclasses.dataclass(frozen=True)
class SavedCheckpoint:
    """What ``CheckpointStore.save`` started writing.

    Attributes:
      step: the checkpoint's global step. (No reference to the state saved: the train
        loop donates its state, and the call's StateLifecycle is its one owner.)
    """

    step: int


class CheckpointStore:
    """One Orbax CheckpointManager per model_dir; a checkpoint's step is the global step.

    Orbax writes each checkpoint to a temporary directory and renames it when complete,
    so a crash or kill mid-save leaves the previous checkpoint as the latest. Saves are
    asynchronous: the step loop goes on while the host writes; ``wait()`` blocks until
    every pending save is on disk.

    A ``model_dir`` in an object store (``gs://bucket/run``) is reached through
    ``jaxspec.store.paths``; before anything is written, its bucket must exist and its
    store must answer (``paths.check_reachable``).

    Args:
      model_dir: the Estimator's model_dir (a local path or a URL).
      keep_checkpoint_max: checkpoints kept (None or 0 keeps all).
      keep_checkpoint_every_n_hours: additionally keep one checkpoint per this many hours.
      process_local: this process's own checkpoints (a node-local tier,
        ``jaxspec.store.local_tier``): Orbax runs with this process alone (no barrier
        with the others) and the records are this process's; False: the model_dir's,
        written by every process together.

    Raises:
      FileNotFoundError: ``model_dir``'s bucket does not exist (the URL is named).
      ConnectionError: ``model_dir``'s store cannot be reached within the time
        ``paths.check_reachable`` allows (the URL is named).
    """

    def __init__(
        self,
        model_dir: str,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: float | None = None,
        process_local: bool = False,
    ) -> None:
        self._alone = process_local and jax.process_count() > 1  # Orbax without the other processes
        keep_every = None
        if keep_checkpoint_every_n_hours and keep_checkpoint_every_n_hours < 10000:
            keep_every = datetime.timedelta(hours=keep_checkpoint_every_n_hours)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep_checkpoint_max or None,
            keep_time_interval=keep_every,
            create=not self._alone,
            multiprocessing_options=by_itself.options()
            if self._alone
            else ocp.options.MultiprocessingOptions(),
            # Alone, a save is synchronous: the signals of Orbax's asynchronous saves are keyed
            # the same in every process, and one process's local save then waits forever.
            enable_async_checkpointing=not self._alone,
            async_options=None
            if self._alone
            else ocp.AsyncOptions(
                post_finalization_callback=self._finalized, barrier_sync_fn=self._barrier_fn()
            ),
        )
        self.directory = checkpoint_dir(model_dir)
        paths.check_reachable(self.directory)
        if self._alone:
            paths.makedirs(self.directory)  # Orbax creates it only with every process
        # (step, extra files) of the saves Orbax is finalising, oldest first.
        self._saving: collections.deque[tuple[int, dict[str, bytes]]] = collections.deque()
        # (step, process checked or None for all) -> (file signature, damage)
        self._verdicts: dict[tuple[int, int | None], tuple[Any, str | None]] = {}
        self._warned: dict[int, str] = {}  # step -> the damage last named in a warning
        self._lock = threading.Lock()
        self._last_started: int | None = None  # the step of the newest save started
        self._manager = ocp.CheckpointManager(
            paths.epath_of(self.directory),
            options=options,
            item_handlers=(
                by_itself.handler(options.multiprocessing_options)
                if self._alone
                else ocp.StandardCheckpointHandler()
            ),
        )

    def _barrier_fn(self) -> Any:
        """With several processes, Orbax's barrier wrapped so that a process other than 0
        writes its own files and record (``_finalized``) when its part of a save is on
        disk: at the barrier every process reaches before process 0 commits (Orbax calls
        the post-finalisation callback on process 0 only). None (Orbax's own) with one."""
        if jax.process_count() == 1 or self._alone:
            return None
        barrier = ocp.multihost.get_barrier_sync_fn()

        def sync(*, key: str, timeout_ms: int) -> None:
            if "async_write_complete" in key and jax.process_index() > 0:  # its writes are done
                self._finalized()
            barrier(key=key, timeout_ms=timeout_ms)

        return sync

    def _finalized(self) -> None:
        """Write this process's extra files and record of the checkpoint just written,
        before its directory takes its final name: process 0 in Orbax's post-finalisation
        callback, the others at the barrier before it (``_barrier_fn``); a background
        thread. Never raises: a checkpoint without a record is still judged by its
        metadata, one without another process's record leaves those files unchecked."""
        with self._lock:
            step, extras = self._saving.popleft() if self._saving else (None, {})
        if step is None:
            return
        try:
            directory = integrity.pending_directory(self.directory, step)
            if directory is None:
                return
            for name, data in extras.items():  # every process writes its own
                paths.write_bytes_atomic(paths.join(directory, name), data)
            integrity.write_digest(directory, *self._writer())  # each process its own files
        except Exception as err:  # an object store's client raises more than OSError
            _log.warning("Could not write the digest of the checkpoint at global step %d: %s.", step, err)

    def _writer(self) -> tuple[int, bool]:
        """``write_digest``'s (record, every file): a process's own record of its own
        files; in a tier of this process alone, process 0's record (the only one) of all."""
        return (0, True) if self._alone else (jax.process_index(), False)

    def damage(self, step: int, collective: bool = False) -> str | None:
        """What makes the checkpoint of ``step`` unreadable, or None when it is intact (its
        files match its records; without records, Orbax can read its metadata).

        Args:
          step: the checkpoint's global step.
          collective: every process calls this together (in the same order): each checks
            only the files it wrote and the verdicts are combined (one all-gather), so that
            all agree. False: this process checks every file (it may be called by one
            process alone).
        """
        path = self.path(step)
        together = collective and jax.process_count() > 1 and not self._alone
        verdict = self._own_verdict(step, path, jax.process_index() if together else None)
        if together:
            first = _first_process_with(verdict is not None)
            if verdict is None and first is not None:
                verdict = f"process {first} found one of its files damaged (its log names the file)"
        if verdict is not None and self._warned.get(step) != verdict:  # once per finding
            self._warned[step] = verdict
            _log.warning(
                "The checkpoint at global step %d (%s) cannot be read: %s; an earlier one is used.",
                step,
                path,
                verdict,
            )
        return verdict

    def _own_verdict(self, step: int, path: str, process_index: int | None) -> str | None:
        """``integrity.damage`` of this process's files (``process_index``) or of all
        (None), remembered while the directory's file signature stays the same."""
        sig = integrity.signature(path)
        cached = self._verdicts.get((step, process_index))
        if cached is not None and cached[0] == sig:
            return cached[1]
        if not paths.isdir(path):
            verdict: str | None = "its directory is missing"
        elif integrity.has_digest(path) or integrity.promised_records(path):
            verdict = integrity.damage(path, process_index, jax.process_count())
        else:
            verdict = self._metadata_damage(step)
        self._verdicts[(step, process_index)] = (sig, verdict)
        return verdict

    def _metadata_damage(self, step: int) -> str | None:
        try:
            if self._manager.item_metadata(step) is None:
                return "Orbax finds no metadata in it"
        except Exception as err:  # Orbax reports a damaged file as any of many types
            return f"its metadata cannot be read ({type(err).__name__}: {str(err)[:200]})"
        return None

    def latest_step(self, collective: bool = False) -> int | None:
        """The global step of the newest intact checkpoint, or None when there is none.

        A damaged newer one is named in a warning (step, path, what is wrong) and skipped.

        Args:
          collective: every process calls this together; each checks only its own files
            (see ``damage``). Training, evaluation and prediction look for their
            checkpoint this way; a call from one process alone must leave it False.

        Raises:
          DataLossError: there are checkpoints, but none is intact.
        """
        steps = self.all_steps()
        for step in reversed(steps):
            if self.damage(step, collective) is None:
                return step
        if steps:
            raise DataLossError(
                f"no checkpoint in {self.directory} can be read: global steps {steps} are all damaged "
                "(see the warnings above); restore a copy, or move them away to start from scratch."
            )
        return None

    def set_aside_damaged(self) -> int | None:
        """Before training: move every damaged checkpoint newer than the newest intact one
        to ``model_dir/checkpoints_damaged/`` (kept, never deleted), so training continues
        from the intact one and can save those steps again. Returns that step (or None).

        Every process calls it together (each checks its own files; see ``damage``).

        Raises:
          DataLossError: there are checkpoints, but none is intact.
        """
        latest = self.latest_step(collective=True)
        newer = [s for s in self.all_steps() if latest is None or s > latest]
        if newer and jax.process_index() == 0:
            model_dir = paths.dirname(self.directory)
            for step in newer:
                moved = integrity.set_aside(model_dir, self.path(step))
                _log.warning("Moved the damaged checkpoint at global step %d to %s.", step, moved)
        if newer:
            if jax.process_count() > 1:
                from jax.experimental import multihost_utils

                multihost_utils.sync_global_devices("jaxspec_set_aside_damaged")
            self._manager.reload()
        return latest

    def resume_step(self) -> int | None:
        """The global step training resumes from: the newest intact checkpoint (every
        process calls it together). A store with a node-local tier
        (``jaxspec.store.local_tier.TieredCheckpointStore``) may name a local one."""
        return self.latest_step(collective=True)

    @property
    def local_tier(self) -> Any:
        """The node-local checkpoint tier (a ``LocalTier``), or None: only the model_dir."""
        return None

    def all_steps(self) -> list[int]:
        """Global steps of every kept checkpoint, oldest first."""
        return sorted(self._manager.all_steps())

    def path(self, step: int) -> str:
        """The directory of the checkpoint at ``step``."""
        return paths.join(self.directory, str(step))

    def save(
        self, step: int, state: Any, extras: Mapping[str, bytes] | None = None, force: bool = True
    ) -> SavedCheckpoint | None:
        """Start saving ``state`` as the checkpoint of ``step`` (asynchronously), with the
        files ``extras`` (``{file name: bytes}``, written into the step directory before
        Orbax renames it, then the digest of them all).

        Returns:
          What was saved (a SavedCheckpoint naming the step), or None
          when no save started (``step`` is saved already, or Orbax declined). Orbax has
          copied the device arrays to the host when this returns (checked by the tests),
          so the caller may donate ``state`` to its next loop right away.
        """
        if step in self._manager.all_steps():
            return None
        if not jax.tree.leaves(state):  # Orbax refuses an empty tree; the step still counts
            state = {EMPTY_STATE_KEY: np.zeros((), np.int8)}
        record = SavedCheckpoint(step)
        # Orbax writes each index of an array from its replica-0 shard, so the handed tree
        # needs no consistent copy (``as_saved``): no second device copy of the state.
        if not self._alone:  # alone: each process writes its own shards
            state = jax.tree.map(_for_orbax, state)
        with self._lock:
            self._saving.append((step, dict(extras or {})))
        try:
            started = self._manager.save(
                step,
                args=by_itself.save_args(state) if self._alone else ocp.args.StandardSave(state),
                force=force,
                custom_metadata=integrity.records_metadata(1 if self._alone else jax.process_count()),
            )
        except Exception as err:
            started = False
            self._name_failed_save(err, step)
            raise
        except BaseException:
            started = False
            raise
        finally:
            if not started:
                with self._lock:
                    if self._saving and self._saving[-1][0] == step:
                        self._saving.pop()
        if started:
            self._last_started = step
            if self._alone:  # committed already: its files and record now
                self._finalized()
        return record if started else None

    def _name_failed_save(self, err: Exception, step: int | None) -> None:
        """Say which save failed: a log line and a note on ``err`` naming the step and
        its directory (the storage client's own error names neither). Earlier
        checkpoints are untouched: a step's files are committed only when complete."""
        where = (
            "a checkpoint" if step is None else f"the checkpoint at global step {step} ({self.path(step)})"
        )
        message = f"Saving {where} failed ({type(err).__name__}); earlier checkpoints are kept."
        _log.error(message)
        err.add_note(message)

    def restore(self, step: int, target: Any) -> Any:
        """Restore the checkpoint of ``step`` into the structure, shapes, dtypes and
        shardings of ``target`` (a pytree of arrays).

        Raises:
          ValueError: the checkpoint's leaves do not match ``target``'s (names the leaf).
          DataLossError: Orbax cannot read it (a checkpoint without a digest whose array
            files are damaged).
        """
        if not jax.tree.leaves(target):
            return target
        _check_against_metadata(self._manager.item_metadata(step), target)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        with _as_data_loss(step, self.path(step)):
            return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))

    def restore_path(self, path: str, target: Any) -> Any:
        """Restore the checkpoint step directory ``path`` (any model_dir's) into ``target``.

        Raises:
          ValueError: ``path`` is not a checkpoint, or its leaves do not match ``target``.
          DataLossError: a file of the checkpoint is truncated, corrupted or missing.
        """
        item = item_directory(path)
        step_dir = paths.dirname(item) if item != paths.absolute(path) else item
        problem = integrity.damage(step_dir)
        if problem is not None:
            raise DataLossError(f"the checkpoint {path} cannot be read: {problem}.")
        if not jax.tree.leaves(target):
            return target
        checkpointer = ocp.StandardCheckpointer()
        with _as_data_loss(None, path):
            tree = _item_tree(item)
        _check_against_metadata(tree, target)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        with _as_data_loss(None, path):
            return checkpointer.restore(paths.epath_of(item), abstract)

    def read(self, step: int | None = None) -> dict[str, np.ndarray]:
        """``{leaf name: numpy value}`` of a checkpoint (the latest by default); a PRNG key
        leaf is given as its key data (``jax.random.key_data``, uint32).

        Raises:
          ValueError: there is no checkpoint.
          DataLossError: Orbax cannot read it (a damaged file of a checkpoint without
            records, or of a ``step`` given explicitly).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise ValueError(f"no checkpoint in {self.directory}.")
        with _as_data_loss(step, self.path(step)):
            restored = restore_on_host(self.path(step))
        return {name: _numpy(value) for name, value in named_leaves(restored) if name != EMPTY_STATE_KEY}

    def refresh(self) -> None:
        """Read the checkpoint list from disk again when it changed (another process or
        Estimator may have written to this model_dir since this store last looked): a
        listing of the step directories is compared with the steps Orbax knows, and
        Orbax reads its checkpoint metadata again only when they differ."""
        try:
            names = paths.listdir(self.directory)
        except OSError:
            names = []
        if sorted(int(n) for n in names if n.isdigit()) != self.all_steps():
            self._manager.reload()

    def metadata(self, step: int) -> Any:
        """The tree of leaf metadata (shape, dtype) saved at ``step``; no array is read."""
        return self._manager.item_metadata(step)

    def restore_numpy(self, step: int, abstract: Any) -> Any:
        """The checkpoint of ``step`` as numpy arrays in the tree of ``abstract`` (numpy
        arrays of the saved shapes and dtypes), read by this process alone.

        Raises:
          DataLossError: a file of it cannot be read.
        """
        args = by_itself.restore_args(abstract) if self._alone else ocp.args.StandardRestore(abstract)
        with _as_data_loss(step, self.path(step)):
            return self._manager.restore(step, args=args)

    def read_extra(self, step: int, name: str) -> bytes | None:
        """The extra file ``name`` saved with the checkpoint of ``step``, or None."""
        path = paths.join(self.path(step), name)
        if not paths.isfile(path):
            return None
        return paths.read_bytes(path)

    def wait(self) -> None:
        """Block until pending saves are complete.

        Raises:
          What the failed background part of a save raised, with a note naming its step.
        """
        try:
            self._manager.wait_until_finished()
        except Exception as err:
            self._name_failed_save(err, self._last_started)
            raise

    def close(self) -> None:
        """Finish pending saves and release the manager."""
        self._manager.close()


def _first_process_with(flag: bool) -> int | None:
    """The lowest index of a process whose ``flag`` is true (None: no process's): a
    collective, every process calls it in the same order."""
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.asarray([flag], np.int32))).reshape(-1)
    return int(np.argmax(flags)) if flags.any() else None


@contextlib.contextmanager
def _as_data_loss(step: int | None, path: str) -> Iterator[None]:
    """Orbax's and TensorStore's many error types for a damaged checkpoint, as one
    DataLossError naming the checkpoint. Orbax's abandoned reads (coroutines of the
    failed restore) are collected here, quietly, instead of printing tracebacks later."""
    failure = None
    try:
        yield
    except DataLossError:
        raise
    except Exception as err:
        failure = f"{type(err).__name__}: {str(err)[:300]}"
    if failure is None:
        return
    _collect_abandoned_reads()
    at = "" if step is None else f" at global step {step}"
    raise DataLossError(f"the checkpoint{at} ({path}) cannot be read: {failure}")


def _collect_abandoned_reads() -> None:
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if "orbax" not in repr(unraisable.object) and "asyncio" not in repr(unraisable.object):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous


def item_directory(path: str) -> str:
    """The directory holding a checkpoint's arrays: ``<step>/default`` for a
    CheckpointManager step directory, ``path`` itself otherwise.

    Raises:
      ValueError: ``path`` does not exist.
    """
    path = paths.absolute(path)
    if not paths.isdir(path):
        raise ValueError(f"{path} is not a checkpoint directory.")
    default = paths.join(path, "default")
    return default if paths.isdir(default) else path


def restore_on_host(path: str) -> Any:
    """A checkpoint's leaves, as saved (a tree of dicts), on this process's first device,
    whatever mesh or process count wrote it.

    Raises:
      ValueError: ``path`` is not a checkpoint directory.
    """
    item = item_directory(path)
    checkpointer = ocp.StandardCheckpointer()
    tree = _item_tree(item)
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
        tree,
        is_leaf=lambda m: hasattr(m, "shape") and hasattr(m, "dtype"),
    )
    return checkpointer.restore(paths.epath_of(item), abstract)


def _item_tree(item: str) -> Any:
    """The array metadata tree of a checkpoint item directory, read by the item's handler:
    a Checkpointer would also look for step metadata, which lives one level up in a
    CheckpointManager step, and warn that it is missing."""
    return ocp.StandardCheckpointHandler().metadata(paths.epath_of(item)).tree


def _check_against_metadata(metadata: Any, target: Any) -> None:
    stored = {name: tuple(getattr(leaf, "shape", ())) for name, leaf in named_leaves(metadata)}
    for name, leaf in named_leaves(target):
        if name not in stored:
            raise ValueError(f"the checkpoint has no leaf {name!r}, which the model's state has.")
        want = tuple(jax.numpy.shape(leaf))
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            want = tuple(jax.eval_shape(jax.random.key_data, leaf).shape)  # Orbax stores a key's data
        if stored[name] != want:
            raise ValueError(
                f"checkpoint leaf {name!r} has shape {stored[name]}, the model's state has {want}."
            )
