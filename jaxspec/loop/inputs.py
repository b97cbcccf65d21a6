"""input_fn results to per-step host batches, with eval/predict padding masks.

input_fn may return a ``tf.data.Dataset`` (duck-typed: anything with
``as_numpy_iterator``), any iterable or generator of ``(features, labels)`` or
``features`` batches, or a single batch (a ``(features, labels)`` tuple, a dict of arrays
or an array). A single batch repeats forever in TRAIN (as tensors returned by a TF
input_fn do) and is one batch in EVAL and PREDICT. A finite input ends the phase.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jaxspec.engine.mesh import canonical_host_array
from jaxspec.mode_keys import ModeKeys

_log = logging.getLogger("jaxspec")
Batch = tuple[Any, Any]


def _is_leaf_batch(x: Any) -> bool:
    return isinstance(x, (np.ndarray, jax.Array)) or (
        isinstance(x, dict) and all(isinstance(v, (np.ndarray, jax.Array, dict)) for v in x.values())
    )


def _split(element: Any) -> Batch:
    """One input element as ``(features, labels)``; labels None when absent."""
    if isinstance(element, tuple):
        if len(element) == 2:
            return element[0], element[1]
        raise ValueError(f"input_fn must give features or (features, labels); got a tuple of {len(element)}.")
    return element, None


def _to_numpy(batch: Batch) -> Batch:
    """Numpy leaves of JAX's dtypes.

    Raises:
      TypeError: a leaf holds strings or objects (JAX has no string dtype), naming it.
    """

    def one(path: Any, x: Any) -> np.ndarray:
        arr = np.asarray(x)
        if arr.dtype.kind in ("U", "S", "O"):
            where = ("features", "labels")[path[0].idx] + jax.tree_util.keystr(path[1:])
            raise TypeError(
                f"{where} holds {arr.dtype} values; JAX arrays cannot hold strings: "
                "turn them into numbers (ids, hashes) in input_fn."
            )
        return canonical_host_array(arr)

    return jax.tree_util.tree_map_with_path(one, batch)


def iterate_batches(result: Any, mode: str, position: Any = None) -> Iterator[Batch]:
    """Iterate ``(features, labels)`` numpy batches from what input_fn returned.

    ``position`` (a ``data_position.DataPosition``, TRAIN only) restores and tracks the
    position of a Dataset or of an iterator with ``get_state()``/``set_state()``.

    Raises:
      ValueError: the result, or an element, is a tuple of more than two parts (a
        tuple returned by input_fn is ``(features, labels)``, as in tf.estimator).
      TypeError: the result is none of the accepted kinds.
    """
    if isinstance(result, tuple) and len(result) > 2:
        raise ValueError(
            f"input_fn must return features or (features, labels); got a tuple of {len(result)}."
        )
    if hasattr(result, "as_numpy_iterator"):
        source: Any = result.as_numpy_iterator() if position is None else position.source(result)
    elif _is_leaf_batch(result) or (
        isinstance(result, tuple) and len(result) == 2 and _is_leaf_batch(result[0])
    ):
        source = itertools.repeat(result) if mode == ModeKeys.TRAIN else iter([result])
    elif hasattr(result, "__iter__"):
        source = iter(result) if position is None else position.source(result)
    else:
        raise TypeError(
            "input_fn must return a tf.data.Dataset, an iterable of batches or one batch; "
            f"got {type(result).__name__}."
        )
    for element in source:
        yield _to_numpy(_split(element))


def batch_rows(batch: Batch) -> int:
    """Rows on axis 0, the same for every leaf of features and labels.

    Raises:
      ValueError: leaves disagree on axis 0, or a leaf is a scalar.
    """
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree.leaves(batch)}
    if None in sizes or len(sizes) != 1:
        raise ValueError(
            f"every features/labels array needs the same batch size on axis 0; got sizes {sizes}."
        )
    return sizes.pop()


def _pad_rows(batch: Batch, rows: int) -> Batch:
    def pad(x: np.ndarray) -> np.ndarray:
        extra = rows - x.shape[0]
        return x if extra == 0 else np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)])

    return jax.tree.map(pad, batch)


def _signature(batch: Batch) -> Any:
    return jax.tree.structure(batch), tuple(
        (np.shape(x), np.asarray(x).dtype) for x in jax.tree.leaves(batch)
    )


def _concat(batches: list[Batch]) -> Batch:
    return jax.tree.map(lambda *xs: np.concatenate(xs), *batches)


def interleave(iterators: list[Iterator[Batch]]) -> Iterator[Batch]:
    """One batch from each iterator in turn (PER_SHARD_V1: one input_fn per replica);
    ends when one runs out part-way through a round (that round is yielded partially)."""
    while True:
        for it in iterators:
            try:
                yield next(it)
            except StopIteration:
                return
