"""Moving loop outputs to the host when the mesh spans several processes.

With one process every output is fully addressable and these are plain transfers. With
several (``jax.distributed.initialize``), an array split over replicas lives partly on
other hosts: replicated values are read locally, per-replica values are gathered with
``multihost_utils.process_allgather`` (a collective: every process must call it, in the
same order), and predictions are read back as this process's own rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils


def to_host(tree: Any) -> Any:
    """Numpy copies of a pytree of arrays, each as its full global value.

    Replicated arrays are read from a local copy; others are all-gathered, so every
    process must call this on the same values.
    """

    def one(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(one, tree)


def local_rows(tree: Any, axis: int = 1) -> Any:
    """This process's rows of arrays split over replicas on ``axis``, in global order
    (the rows this process fed with ``make_array_from_process_local_data``)."""

    def one(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        shards = sorted(x.addressable_shards, key=lambda s: s.index[axis].start or 0)
        starts, parts = set(), []
        for shard in shards:
            start = shard.index[axis].start or 0
            if start not in starts:  # a replicated axis shows one shard per device
                starts.add(start)
                parts.append(np.asarray(shard.data))
        return np.concatenate(parts, axis=axis)

    return jax.tree.map(one, tree)


def agree(value: int, how: str) -> int:
    """The ``'min'`` or ``'max'`` of ``value`` over all processes (itself with one)."""
    return agree_each([value], [how])[0]


def agree_each(values: Sequence[int], hows: Sequence[str]) -> list[int]:
    """``agree`` for several values at once, in one gathering over the processes:
    ``values[i]``'s ``hows[i]`` (``'min'`` or ``'max'``)."""
    if jax.process_count() == 1:
        return [int(v) for v in values]
    gathered = np.asarray(multihost_utils.process_allgather(np.asarray(values, np.int64))).reshape(
        -1, len(values)
    )
    return [int(col.min() if how == "min" else col.max()) for col, how in zip(gathered.T, hows, strict=True)]
