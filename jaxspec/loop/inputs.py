"""input_fn results to per-step host batches, with eval/predict padding masks.

input_fn may return a ``tf.data.Dataset`` (duck-typed: anything with
``as_numpy_iterator``), any iterable or generator of ``(features, labels)`` or
``features`` batches, or a single batch (a ``(features, labels)`` tuple or a dict of
arrays). A bare array is refused: it is as much an iterable of rows as one batch, and a
model_fn or init_fn reading ``features['x']`` would fail far from the cause; an array as
the only features is ``(array, None)``. A single batch repeats forever in TRAIN (as tensors returned by a TF
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
    """One batch rather than an iterable of them: an array, a dict (iterating a dict
    would give its keys, never batches), or a number (then rejected as a scalar)."""
    return isinstance(x, (np.ndarray, np.generic, jax.Array, dict, int, float, complex))


ACCEPTED_FORMS = (
    "a tf.data.Dataset; an iterable or generator of batches, each features or (features, labels); "
    "or one batch: (features, labels) or a dict of features such as {'x': array} "
    "(an array as the only features: (array, None))"
)


def _refuse_bare_array(result: Any) -> None:
    """TypeError for an array returned by input_fn on its own, naming it."""
    if isinstance(result, (np.ndarray, jax.Array)):
        what = (
            f"{type(result).__module__}.{type(result).__name__} of shape {np.shape(result)}, {result.dtype}"
        )
        raise TypeError(f"input_fn returned a bare {what}; it must return {ACCEPTED_FORMS}.")


def _split(element: Any, index: int) -> Batch:
    """One input element as ``(features, labels)``; labels None when absent."""
    if isinstance(element, tuple):
        if len(element) == 2:
            return element[0], element[1]
        raise ValueError(
            f"input_fn must give features or (features, labels); batch index {index} is a tuple of {len(element)}."
        )
    return element, None


def _where(path: Any) -> str:
    return ("features", "labels")[path[0].idx] + jax.tree_util.keystr(path[1:])


def _to_numpy(batch: Batch, index: int = 0) -> Batch:
    """Numpy leaves of JAX's dtypes.

    Raises:
      TypeError: a leaf holds strings or objects (JAX has no string dtype), naming it
        and the batch.
      ValueError: a leaf is not an array (ragged nested lists), naming it and the batch.
    """

    def one(path: Any, x: Any) -> np.ndarray:
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError) as err:
            raise ValueError(
                f"{_where(path)} of batch index {index} is not an array (ragged rows?): {err}"
            ) from None
        if arr.dtype.kind in ("U", "S", "O") or (
            arr.dtype.kind == "V" and not jax.dtypes.issubdtype(arr.dtype, np.number)  # bfloat16 is kind V
        ):
            raise TypeError(
                f"{_where(path)} of batch index {index} holds {arr.dtype} values; JAX arrays cannot hold "
                "strings or objects: turn them into numbers (ids, hashes) in input_fn."
            )
        return canonical_host_array(arr)

    return jax.tree_util.tree_map_with_path(one, batch)


def _ready(batch: Batch) -> bool:
    """Whether ``batch`` passes ``_to_numpy`` and ``_check_rows`` unchanged: every leaf a
    numpy array of a numeric JAX dtype, all with the same rows (at least one) on axis 0.
    A cheap test done on every batch; anything else takes the checking path (and its
    errors)."""
    leaves = jax.tree.leaves(batch)
    if not leaves:
        return False
    rows = None
    for x in leaves:
        if type(x) is not np.ndarray or not x.ndim or x.dtype.kind not in "biufc" or not x.dtype.isnative:
            return False
        if x.dtype != jax.dtypes.canonicalize_dtype(x.dtype) or (rows is not None and x.shape[0] != rows):
            return False
        rows = x.shape[0]
    return bool(rows)


def _check_rows(batch: Batch, index: int) -> Batch:
    """Every leaf has the same number of rows on axis 0, at least one.

    Raises:
      ValueError: no arrays at all, a scalar leaf, leaves of different rows, or zero
        rows; naming the leaves and the batch.
    """
    rows = {
        _where(path): (np.shape(x)[0] if np.ndim(x) else None)
        for path, x in jax.tree_util.tree_flatten_with_path(batch)[0]
    }
    if not rows:
        raise ValueError(f"batch index {index} of input_fn holds no arrays.")
    scalars = [name for name, n in rows.items() if n is None]
    if scalars:
        raise ValueError(
            f"{scalars[0]} of batch index {index} is a scalar; every features/labels array needs a batch axis 0."
        )
    if len(set(rows.values())) != 1:
        listed = ", ".join(f"{name}: {n}" for name, n in rows.items())
        raise ValueError(
            f"every features/labels array needs the same rows on axis 0; batch index {index} has {listed}."
        )
    if next(iter(rows.values())) == 0:
        raise ValueError(f"batch index {index} of input_fn has 0 rows; a batch needs at least one example.")
    return batch


def iterate_batches(result: Any, mode: str, position: Any = None) -> Iterator[Batch]:
    """Iterate ``(features, labels)`` numpy batches from what input_fn returned.

    ``position`` (a ``data_position.DataPosition``, TRAIN only) restores and tracks the
    position of a Dataset or of an iterator with ``get_state()``/``set_state()``.

    Raises:
      ValueError: the result, or an element, is a tuple of more than two parts (a
        tuple returned by input_fn is ``(features, labels)``, as in tf.estimator); a
        batch with a scalar, ragged or differently-sized leaf, no arrays or no rows
        (naming the leaf and the batch index, counted from 0).
      TypeError: the result is a bare array (named, with the accepted forms) or none of
        the accepted kinds; a leaf of strings or objects.
      Exception: what the user's iterator raises, of its own type, with a note naming
        the batch index it was reading.
    """
    if isinstance(result, tuple) and len(result) > 2:
        raise ValueError(
            f"input_fn must return features or (features, labels); got a tuple of {len(result)}."
        )
    _refuse_bare_array(result)
    if hasattr(result, "as_numpy_iterator"):
        source: Any = result.as_numpy_iterator() if position is None else position.source(result)
    elif _is_leaf_batch(result) or (
        isinstance(result, tuple) and len(result) == 2 and _is_leaf_batch(result[0])
    ):
        source = itertools.repeat(result) if mode == ModeKeys.TRAIN else iter([result])
    elif hasattr(result, "__iter__"):
        source = iter(result) if position is None else position.source(result)
    else:
        raise TypeError(f"input_fn returned a {type(result).__name__}; it must return {ACCEPTED_FORMS}.")
    source = iter(source)
    for index in itertools.count():
        try:
            element = next(source)
        except StopIteration:
            return
        except Exception as err:  # the user's data raised: its own error, saying where
            err.add_note(f"raised by input_fn's data while reading batch index {index}")
            raise
        batch = _split(element, index)
        yield batch if _ready(batch) else _check_rows(_to_numpy(batch, index), index)


def batch_rows(batch: Batch) -> int:
    """Rows on axis 0, the same for every leaf of features and labels.

    Raises:
      ValueError: leaves disagree on axis 0, or a leaf is a scalar.
    """
    leaves = jax.tree.leaves(batch)
    if leaves and all(type(x) is np.ndarray and x.ndim for x in leaves):
        rows = leaves[0].shape[0]
        if all(x.shape[0] == rows for x in leaves):
            return rows
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    rows = next(iter(sizes)) if len(sizes) == 1 else None
    if rows is None:
        raise ValueError(
            f"every features/labels array needs the same batch size on axis 0; got sizes {sizes}."
        )
    return rows


def _pad_rows(batch: Batch, rows: int) -> Batch:
    def pad(x: np.ndarray) -> np.ndarray:
        extra = rows - x.shape[0]
        return x if extra == 0 else np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)])

    return jax.tree.map(pad, batch)


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
