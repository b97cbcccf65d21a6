"""Checkpoints in model_dir through Orbax's CheckpointManager (atomic, async, keep N)."""

from __future__ import annotations

import datetime
import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

CHECKPOINT_SUBDIR = "checkpoints"
EMPTY_STATE_KEY = "__empty_state__"  # what a checkpoint of a state with no leaves holds


def checkpoint_dir(model_dir: str) -> str:
    """Where the checkpoints of ``model_dir`` live: ``model_dir/checkpoints/<global_step>``."""
    return os.path.join(os.path.abspath(model_dir), CHECKPOINT_SUBDIR)


class CheckpointStore:
    """One Orbax CheckpointManager per model_dir; a checkpoint's step is the global step.

    Orbax writes each checkpoint to a temporary directory and renames it when complete,
    so a crash or kill mid-save leaves the previous checkpoint as the latest. Saves are
    asynchronous: the step loop goes on while the host writes; ``wait()`` blocks until
    every pending save is on disk.

    Args:
      model_dir: the Estimator's model_dir.
      keep_checkpoint_max: checkpoints kept (None or 0 keeps all).
      keep_checkpoint_every_n_hours: additionally keep one checkpoint per this many hours.
    """

    def __init__(
        self,
        model_dir: str,
        keep_checkpoint_max: int | None = 5,
        keep_checkpoint_every_n_hours: float | None = None,
    ) -> None:
        keep_every = None
        if keep_checkpoint_every_n_hours and keep_checkpoint_every_n_hours < 10000:
            keep_every = datetime.timedelta(hours=keep_checkpoint_every_n_hours)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep_checkpoint_max or None,
            keep_time_interval=keep_every,
            create=True,
            enable_async_checkpointing=True,
        )
        self.directory = checkpoint_dir(model_dir)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=ocp.StandardCheckpointHandler()
        )

    def latest_step(self) -> int | None:
        """The global step of the newest complete checkpoint, or None."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Global steps of every kept checkpoint, oldest first."""
        return sorted(self._manager.all_steps())

    def path(self, step: int) -> str:
        """The directory of the checkpoint at ``step``."""
        return os.path.join(self.directory, str(step))

    def save(self, step: int, state: Any, force: bool = True) -> bool:
        """Start saving ``state`` as the checkpoint of ``step`` (asynchronously)."""
        if step in self._manager.all_steps():
            return False
        if not jax.tree.leaves(state):  # Orbax refuses an empty tree; the step still counts
            state = {EMPTY_STATE_KEY: np.zeros((), np.int8)}
        return self._manager.save(step, args=ocp.args.StandardSave(state), force=force)

    def restore(self, step: int, target: Any) -> Any:
        """Restore the checkpoint of ``step`` into the structure, shapes, dtypes and
        shardings of ``target`` (a pytree of arrays).

        Raises:
          ValueError: the checkpoint's leaves do not match ``target``'s (names the leaf).
        """
        if not jax.tree.leaves(target):
            return target
        _check_against_metadata(self._manager.item_metadata(step), target)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        return self._manager.restore(step, args=ocp.args.StandardRestore(abstract))

    def restore_path(self, path: str, target: Any) -> Any:
        """Restore the checkpoint step directory ``path`` (any model_dir's) into ``target``.

        Raises:
          ValueError: ``path`` is not a checkpoint, or its leaves do not match ``target``.
        """
        item = item_directory(path)
        if not jax.tree.leaves(target):
            return target
        checkpointer = ocp.StandardCheckpointer()
        _check_against_metadata(_item_tree(item), target)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        return checkpointer.restore(item, abstract)

    def read(self, step: int | None = None) -> dict[str, np.ndarray]:
        """``{leaf name: numpy value}`` of a checkpoint (the latest by default).

        Raises:
          ValueError: there is no checkpoint.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise ValueError(f"no checkpoint in {self.directory}.")
        restored = restore_on_host(self.path(step))
        return {name: np.asarray(value) for name, value in named_leaves(restored) if name != EMPTY_STATE_KEY}

    def wait(self) -> None:
        """Block until pending saves are complete."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Finish pending saves and release the manager."""
        self._manager.close()


def item_directory(path: str) -> str:
    """The directory holding a checkpoint's arrays: ``<step>/default`` for a
    CheckpointManager step directory, ``path`` itself otherwise.

    Raises:
      ValueError: ``path`` does not exist.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise ValueError(f"{path} is not a checkpoint directory.")
    default = os.path.join(path, "default")
    return default if os.path.isdir(default) else path


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
    return checkpointer.restore(item, abstract)


def _item_tree(item: str) -> Any:
    """The array metadata tree of a checkpoint item directory, read by the item's handler:
    a Checkpointer would also look for step metadata, which lives one level up in a
    CheckpointManager step, and warn that it is missing."""
    return ocp.StandardCheckpointHandler().metadata(epath.Path(item)).tree


def _key_name(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def named_leaves(tree: Any) -> list[tuple[str, Any]]:
    """``(name, leaf)`` pairs of a state pytree; names join the key path with ``/``
    (``params/Dense_0/kernel``), the way TF names variables."""
    return [
        ("/".join(_key_name(k) for k in path), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def _check_against_metadata(metadata: Any, target: Any) -> None:
    stored = {name: tuple(getattr(leaf, "shape", ())) for name, leaf in named_leaves(metadata)}
    for name, leaf in named_leaves(target):
        if name not in stored:
            raise ValueError(f"the checkpoint has no leaf {name!r}, which the model's state has.")
        want = tuple(jax.numpy.shape(leaf))
        if stored[name] != want:
            raise ValueError(
                f"checkpoint leaf {name!r} has shape {stored[name]}, the model's state has {want}."
            )
