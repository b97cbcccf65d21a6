"""The session hooks and HCCL rank functions of Ascend's ``npu_init``, on one CPU process.

- ``NPUCheckpointSaverHook``: TensorFlow's CheckpointSaverHook (the adapter's adds log lines).
- ``NPUOutputTensorHook``: evaluates ``tensors`` at every step and calls
  ``output_fn(values)`` with the list of the steps' values (one dict per step) every
  ``output_every_n_steps`` steps and once more at the end for the rest, as the adapter does.
- ``NPUBroadcastGlobalVariablesHook``: one process holds the only copy of the variables:
  nothing to broadcast (several ranks need Ascend's HCCL).
- ``get_rank_size`` / ``get_rank_id`` / ``get_local_rank_size`` / ``get_local_rank_id``: read
  ``RANK_SIZE`` / ``RANK_ID`` as the adapter's launcher sets them (1 and 0 when unset); the
  group functions need HCCL and raise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

import tensorflow as tf

from tf_bridge.runtime.npu.optimizer import rank_size

_log = logging.getLogger("tf_bridge")

NPUCheckpointSaverHook = tf.compat.v1.train.CheckpointSaverHook


class NPUOutputTensorHook(tf.compat.v1.train.SessionRunHook):
    """Hands every step's values of ``tensors`` to ``output_fn`` in batches of steps.

    Args:
      tensors: dict of tag to tensor (or tensor name), or a list of tensors; None: nothing
        is fetched and ``output_fn`` is never called.
      dependencies: ops the values must wait for (control dependencies), or None.
      output_fn: called with a list of per-step values (dicts of tag to numpy value; a
        list's tags are the tensors' names).
      output_every_n_steps: steps per call; 0 calls ``output_fn`` only at the end.
    """

    def __init__(
        self,
        tensors: Mapping[str, tf.Tensor | str] | Sequence[tf.Tensor] | None,
        dependencies: tf.Operation | tf.Tensor | Sequence[tf.Operation | tf.Tensor] | None = None,
        output_fn: Callable[[list[dict[str, object]]], object] | None = None,
        output_every_n_steps: int = 0,
    ) -> None:
        if tensors is not None and not isinstance(tensors, dict):
            tensors = {getattr(t, "name", t): t for t in tensors}
        if tensors is not None and dependencies is not None:
            deps = dependencies if isinstance(dependencies, (list, tuple)) else [dependencies]
            with tf.control_dependencies(deps):
                tensors = {k: tf.identity(v) for k, v in tensors.items()}
        self._tensors = tensors
        self._output_fn = output_fn
        self._every = output_every_n_steps
        self._pending: list[dict[str, object]] = []
        self._steps = 0

    def before_run(
        self, run_context: tf.compat.v1.train.SessionRunContext
    ) -> tf.compat.v1.train.SessionRunArgs | None:
        return tf.compat.v1.train.SessionRunArgs(self._tensors) if self._tensors is not None else None

    def after_run(
        self,
        run_context: tf.compat.v1.train.SessionRunContext,
        run_values: tf.compat.v1.train.SessionRunValues,
    ) -> None:
        if self._tensors is None:
            return
        self._pending.append(dict(run_values.results))
        self._steps += 1
        if self._every and self._steps % self._every == 0:
            self._flush()

    def end(self, session: tf.compat.v1.Session) -> None:
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        if self._output_fn is not None:
            self._output_fn(list(self._pending))
        self._pending.clear()


class NPUBroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """The adapter's variable broadcast from ``root_rank``; one CPU process has nothing to
    broadcast to.

    Raises:
      RuntimeError: (at ``begin``) ``RANK_SIZE`` > 1: several ranks need Ascend's HCCL.
    """

    def __init__(self, root_rank: int | None = None, index: int | None = None) -> None:
        self._root_rank = root_rank
        self._index = index

    def begin(self) -> None:
        if rank_size() > 1:
            raise RuntimeError(
                f"NPUBroadcastGlobalVariablesHook: RANK_SIZE={rank_size()} needs Ascend's HCCL "
                "(npu_bridge); tf_bridge's CPU path runs one process."
            )
        _log.info("NPUBroadcastGlobalVariablesHook on CPU: one process, nothing to broadcast.")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


def get_rank_size(group: str = "hccl_world_group") -> int:
    """The number of ranks (``RANK_SIZE``, 1 when unset)."""
    return rank_size()


def get_local_rank_size(group: str = "hccl_world_group") -> int:
    """Ranks on this host: all of them on CPU (``RANK_SIZE``, 1 when unset)."""
    return rank_size()


def get_rank_id(group: str = "hccl_world_group") -> int:
    """This process's rank (``RANK_ID``, 0 when unset)."""
    return _env_int("RANK_ID", 0)


def get_local_rank_id(group: str = "hccl_world_group") -> int:
    """This process's rank on its host (``RANK_ID``, 0 when unset)."""
    return _env_int("RANK_ID", 0)


def _needs_hccl(name: str) -> Callable[..., NoReturn]:
    def unavailable(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(
            f"{name} needs Ascend's HCCL (npu_bridge on an NPU host); tf_bridge's CPU path has none."
        )

    unavailable.__name__ = name
    unavailable.__doc__ = f"Ascend's ``{name}``: needs HCCL; raises RuntimeError on CPU."
    return unavailable


create_group = _needs_hccl("create_group")
destroy_group = _needs_hccl("destroy_group")
get_world_rank_from_group_rank = _needs_hccl("get_world_rank_from_group_rank")
get_group_rank_from_world_rank = _needs_hccl("get_group_rank_from_world_rank")
set_split_strategy_by_idx = _needs_hccl("set_split_strategy_by_idx")
set_split_strategy_by_size = _needs_hccl("set_split_strategy_by_size")
