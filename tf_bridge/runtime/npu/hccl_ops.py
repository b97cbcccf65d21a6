"""``npu_bridge.hccl.hccl_ops`` on tf_bridge's CPU path: Ascend's collective ops over the
one rank a CPU process is.

Over one rank every collective has its plain meaning: ``allreduce`` (any reduction),
``reduce`` and ``broadcast`` return their input, ``allgather`` and ``reduce_scatter``
with ``rank_size=1`` too (a concatenation / split of one part). Each returns a new dense
tensor, as the adapter's ops do (an ``IndexedSlices`` gradient is made dense, as TensorFlow
converts it for any op), and gradients flow through as through the adapter's ops.

More than one rank (``RANK_SIZE`` > 1, or a ``TF_CONFIG`` cluster with several training
tasks) needs Ascend's HCCL: every op raises RuntimeError when called, naming itself.
tf_bridge runs a ``TF_CONFIG`` cluster as tf.estimator did, by between-graph replication
over parameter servers, where no collective joins the workers' graphs.
``send``/``receive`` and the ``remote_*`` ops need a peer or the NPU's remote memory and
raise NotImplementedError when called.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeAlias

import tensorflow as tf

from tf_bridge.runtime.cluster_settings import read_tf_config
from tf_bridge.runtime.npu.npu_only import npu_only

# What the collectives accept: a tf.Tensor, or anything tf.convert_to_tensor takes.
TensorLike: TypeAlias = tf.types.experimental.TensorLike

__all__ = [
    "allgather",
    "allreduce",
    "broadcast",
    "receive",
    "reduce",
    "reduce_scatter",
    "remote_read",
    "remote_ref_read",
    "remote_scatter_write",
    "remote_write",
    "send",
]

WORLD_GROUP = "hccl_world_group"
REDUCTIONS = ("min", "max", "prod", "sum")
_TRAINERS = ("chief", "master", "worker")


def world_size() -> int:
    """Ranks of the job: ``RANK_SIZE`` when set (the adapter's launcher sets it), else the
    training tasks (chief, master, worker) of ``TF_CONFIG``'s cluster, else 1."""
    raw = os.environ.get("RANK_SIZE", "").strip()
    if raw.isdigit():
        return int(raw)
    cluster = read_tf_config().get("cluster") or {}
    return max(1, sum(len(cluster.get(job) or ()) for job in _TRAINERS))


def _one_rank(op: str, group: str) -> None:
    """Raises: RuntimeError (several ranks), ValueError (a group other than the world)."""
    size = world_size()
    if size > 1:
        raise RuntimeError(
            f"hccl_ops.{op}: the job has {size} ranks (RANK_SIZE or TF_CONFIG); a collective over several "
            "ranks needs Ascend's HCCL (npu_bridge on NPU hosts). tf_bridge's CPU path runs the ops on one "
            "rank only; a TF_CONFIG cluster there is between-graph replication with parameter servers."
        )
    if group != WORLD_GROUP:
        raise ValueError(
            f"hccl_ops.{op}: group {group!r} does not exist on tf_bridge's CPU path (only {WORLD_GROUP!r}: "
            "create_group needs HCCL)."
        )


def _dense(tensor: TensorLike) -> tf.Tensor:
    return tf.identity(tf.convert_to_tensor(tensor))


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"hccl_ops.{op}: reduction must be one of {REDUCTIONS}; got {reduction!r}.")


def _check_rank_size(op: str, rank_size: int) -> None:
    if rank_size != 1:
        raise ValueError(f"hccl_ops.{op}: rank_size must be the job's rank count, 1 here; got {rank_size!r}.")


def _check_root(op: str, root_rank: int) -> None:
    if root_rank != 0:
        raise ValueError(f"hccl_ops.{op}: root_rank must be a rank of the job (0 here); got {root_rank!r}.")


def allreduce(
    tensor: TensorLike, reduction: str, fusion: int = 1, fusion_id: int = -1, group: str = WORLD_GROUP
) -> tf.Tensor:
    """``reduction`` ('sum', 'prod', 'min' or 'max') of ``tensor`` over the ranks, on every
    rank: over one rank, ``tensor`` (same shape and dtype). ``fusion``/``fusion_id`` steer
    the NPU's op fusion and are unused here.

    Raises:
      ValueError: an unknown reduction or group. RuntimeError: several ranks.
    """
    _check_reduction("allreduce", reduction)
    _one_rank("allreduce", group)
    return _dense(tensor)


def reduce(
    tensor: TensorLike,
    reduction: str,
    root_rank: int,
    fusion: int = 0,
    fusion_id: int = -1,
    group: str = WORLD_GROUP,
) -> tf.Tensor:
    """``reduction`` of ``tensor`` over the ranks, delivered to ``root_rank``: over one
    rank, ``tensor``.

    Raises:
      ValueError: an unknown reduction or group, a root_rank other than 0. RuntimeError: several ranks.
    """
    _check_reduction("reduce", reduction)
    _one_rank("reduce", group)
    _check_root("reduce", root_rank)
    return _dense(tensor)


def allgather(tensor: TensorLike, rank_size: int, group: str = WORLD_GROUP) -> tf.Tensor:
    """The ranks' ``tensor``s concatenated on axis 0 (``rank_size`` parts): over one rank,
    ``tensor`` (rank >= 1).

    Raises:
      ValueError: a scalar tensor, rank_size other than 1, an unknown group. RuntimeError: several ranks.
    """
    _one_rank("allgather", group)
    _check_rank_size("allgather", rank_size)
    tensor = _dense(tensor)
    if tensor.shape.rank == 0:
        raise ValueError("hccl_ops.allgather: tensor must have rank >= 1 (it is concatenated on axis 0).")
    return tensor


def reduce_scatter(tensor: TensorLike, reduction: str, rank_size: int, group: str = WORLD_GROUP) -> tf.Tensor:
    """``reduction`` over the ranks, split on axis 0 into ``rank_size`` parts, one per rank:
    over one rank, ``tensor``.

    Raises:
      ValueError: an unknown reduction or group, rank_size other than 1. RuntimeError: several ranks.
    """
    _check_reduction("reduce_scatter", reduction)
    _one_rank("reduce_scatter", group)
    _check_rank_size("reduce_scatter", rank_size)
    return _dense(tensor)


def broadcast(
    tensor: TensorLike | Sequence[TensorLike],
    root_rank: int,
    fusion: int = 2,
    fusion_id: int = 0,
    group: str = WORLD_GROUP,
) -> tf.Tensor | list[tf.Tensor]:
    """``root_rank``'s values of ``tensor`` (a list of tensors, as the adapter's op takes,
    or one tensor) on every rank: over one rank, the inputs; a list for a list.

    Raises:
      ValueError: a root_rank other than 0, an unknown group. RuntimeError: several ranks.
    """
    _one_rank("broadcast", group)
    _check_root("broadcast", root_rank)
    if isinstance(tensor, Sequence) and not isinstance(tensor, (str, bytes)):
        return [_dense(t) for t in tensor]
    return _dense(tensor)


_PEER = "a second rank"
send = npu_only("hccl_ops.send", f"point-to-point HCCL needs {_PEER}")
receive = npu_only("hccl_ops.receive", f"point-to-point HCCL needs {_PEER}")
remote_read = npu_only("hccl_ops.remote_read", "the NPU's remote memory access")
remote_ref_read = npu_only("hccl_ops.remote_ref_read", "the NPU's remote memory access")
remote_write = npu_only("hccl_ops.remote_write", "the NPU's remote memory access")
remote_scatter_write = npu_only("hccl_ops.remote_scatter_write", "the NPU's remote memory access")
