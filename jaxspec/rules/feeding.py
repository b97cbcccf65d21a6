"""The rules of ``tf.compat.v1.estimator.inputs``' ``numpy_input_fn`` and
``pandas_input_fn`` (TF 2.15), for jaxspec's plain input_fns and tf_bridge's queue-fed
ones: the argument checks, how ``x`` and ``y`` become one table of columns and come
back apart, and the order in which each reader walks the rows.

Each reader (TF: one per ``num_threads``) walks the rows from its start (0, or a random
row when shuffling), wrapping round, in chunks of ``batch_size`` rows, until it has read
``num_epochs`` times the number of rows (``None``: never); its last chunk may be short
so that no reader reads past its last epoch. Batches are then taken from the queue
(FIFO, or a random-shuffle buffer), so with ``num_epochs`` set the last batch may be
short, and batches may span epochs.

numpy only; no jax and no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas

# One column's value in a batch: a numpy array, or the side's (a JAX array, a tf.Tensor).
V = TypeVar("V")

#: The single feature's key when ``x`` is an array (it is returned as an array again).
ARRAY_KEY = "__direct_np_input__"
#: The target's key when ``y`` is an array; ``_n`` is appended while it collides with x's.
TARGET_KEY = "__target_key__"


def check_shuffle(shuffle: object) -> bool:
    """``shuffle`` must be given as a bool (TF 2.15's default None is refused).

    Raises:
      ValueError: it is not a bool.
    """
    if not isinstance(shuffle, bool):
        raise ValueError(
            f"shuffle must be passed explicitly as True or False (True is usual for training, False "
            f"for evaluation and prediction); got {shuffle!r}."
        )
    return shuffle


def check_reader_args(
    batch_size: object, num_epochs: object, queue_capacity: object, num_threads: object
) -> None:
    """Integers where TF expects them. TF 2.15 checks none of these and fails later (in a
    queue runner thread, or by hanging); jaxspec and tf_bridge refuse them at once.

    Raises:
      ValueError: batch_size, queue_capacity or num_threads is not an integer >= 1, or
        num_epochs is neither None nor an integer.
    """
    for name, value in (("batch_size", batch_size), ("queue_capacity", queue_capacity)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    if not _is_int(num_threads) or num_threads < 1:
        raise ValueError(f"num_threads must be an integer >= 1, got {num_threads!r}.")
    if num_epochs is not None and not _is_int(num_epochs):
        raise ValueError(f"num_epochs must be None (repeat forever) or an integer, got {num_epochs!r}.")


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def queue_warnings(shuffle: bool, num_threads: int, num_epochs: int | None) -> list[str]:
    """What TF 2.15 warns about when several readers feed one queue (each reader reads
    ``num_epochs`` epochs of its own; unshuffled readers interleave)."""
    out = []
    if num_threads > 1 and num_epochs is not None:
        out.append(
            f"{num_threads} reader threads each read num_epochs={num_epochs} epochs, so the input holds "
            f"{num_threads * num_epochs} epochs in all; use num_threads=1 to read num_epochs epochs."
        )
    if num_threads > 1 and shuffle and num_epochs is not None:
        out.append(
            "several reader threads with shuffle=True and num_epochs set read the rows in step with each "
            "other into one shuffling queue: the order may be poorly shuffled."
        )
    if num_threads > 1 and not shuffle:
        out.append(
            "several reader threads with shuffle=False interleave their rows: the order is not the rows' "
            "order. Use one thread for ordered rows, or shuffle=True with several."
        )
    return out


class RowReader:
    """One reader's walk over ``rows`` rows (see the module docstring).

    Args:
      rows: rows in the table (> 0).
      chunk: rows per chunk (the batch size).
      num_epochs: passes over the rows, or None for no end (<= 0: nothing is read).
      start: the first row read.
    """

    def __init__(self, rows: int, chunk: int, num_epochs: int | None, start: int = 0) -> None:
        self._rows = rows
        self._chunk = chunk
        self._left = None if num_epochs is None else max(int(num_epochs), 0) * rows
        self._next = start % rows

    def next_chunk(self) -> np.ndarray | None:
        """The row indices (int64) of the next chunk, or None once every epoch is read."""
        n = self._chunk if self._left is None else min(self._chunk, self._left)
        if n == 0:
            return None
        indices = (self._next + np.arange(n, dtype=np.int64)) % self._rows
        self._next = int((self._next + n) % self._rows)
        if self._left is not None:
            self._left -= n
        return indices


@dataclasses.dataclass(frozen=True)
class Table:
    """``x`` and ``y`` as one table of columns, and how a batch of it splits back.

    Attributes:
      columns: column name -> array whose axis 0 is the rows (features first).
      feature_keys: the feature columns, in the order the features dict has them.
      target: None (no ``y``), a column name (``y`` one array or Series), or a dict
        from column name to the key the labels dict has it under (``y`` a dict or
        DataFrame).
      array_features: the features are one array (``x`` was an array), not a dict.
    """

    columns: Mapping[str, Any]
    feature_keys: tuple[str, ...]
    target: str | Mapping[str, str] | None = None
    array_features: bool = False

    @property
    def rows(self) -> int:
        """Rows in the table."""
        return len(next(iter(self.columns.values())))

    def split(self, batch: Mapping[str, V]) -> V | dict[str, V] | tuple[V | dict[str, V], V | dict[str, V]]:
        """A batch of columns (same keys, arrays or tensors) as features, or as
        ``(features, labels)`` when there is a ``y``."""
        features: V | dict[str, V]
        if self.array_features:
            features = batch[self.feature_keys[0]]
        else:
            features = {key: batch[key] for key in self.feature_keys}
        if self.target is None:
            return features
        if isinstance(self.target, str):
            return features, batch[self.target]
        return features, {key: batch[column] for column, key in self.target.items()}


def _sorted_columns(data: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
    return {key: np.asarray(data[key]) for key in sorted(data)}


def numpy_table(
    x: Mapping[str, npt.ArrayLike] | np.ndarray, y: Mapping[str, npt.ArrayLike] | npt.ArrayLike | None
) -> Table:
    """``numpy_input_fn``'s table: ``x`` a dict of arrays (keys sorted) or one array,
    ``y`` None, an array, or a dict of arrays (keys sorted).

    Raises:
      TypeError: x is neither a dict nor a numpy array.
      ValueError: x is an empty dict or an empty array; y is an empty dict; x and y
        share keys (the count and the keys are named); the columns differ in length.
    """
    if isinstance(x, dict):
        if not x:
            raise ValueError("x is an empty dict: it needs at least one feature array.")
        columns = _sorted_columns(x)
    elif isinstance(x, np.ndarray):
        if x.size == 0:
            raise ValueError(f"x is an empty array (shape {x.shape}): it has no rows to read.")
        columns = {ARRAY_KEY: x}
    else:
        raise TypeError(f"x should be a numpy array or a dict of numpy arrays, not a {type(x).__name__}.")
    feature_keys = tuple(columns)
    target: str | dict[str, str] | None = None
    if isinstance(y, dict):
        if not y:
            raise ValueError("y is an empty dict; pass y=None for an input without labels.")
        shared = set(columns) & set(y)
        if shared:
            raise ValueError(
                f"x and y may not share keys; both have {sorted(shared)} ({len(shared)} in all)."
            )
        labels = _sorted_columns(y)
        columns.update(labels)
        target = {key: key for key in labels}
    elif y is not None:
        target = TARGET_KEY
        while target in columns:
            target += "_n"
        columns[target] = np.asarray(y)
    _check_lengths(columns, feature_keys, target)
    return Table(columns, feature_keys, target, isinstance(x, np.ndarray))


def _check_lengths(
    columns: Mapping[str, np.ndarray], feature_keys: tuple[str, ...], target: str | Mapping[str, str] | None
) -> None:
    if len({np.shape(v)[0] if np.ndim(v) else None for v in columns.values()}) == 1:
        return
    x_shapes = {key: np.shape(columns[key]) for key in feature_keys}
    if target is None:
        y_shapes: object = None
    elif isinstance(target, str):
        y_shapes = np.shape(columns[target])
    else:
        y_shapes = {key: np.shape(columns[key]) for key in target}
    raise ValueError(
        "x and y have arrays of different lengths; all must have the same rows on axis 0.\n"
        f"x shapes: {x_shapes}\ny shapes: {y_shapes}"
    )


def pandas_table(
    pd: types.ModuleType,
    x: pandas.DataFrame,
    y: pandas.Series | pandas.DataFrame | None,
    target_column: object,
) -> Table:
    """``pandas_input_fn``'s table: x's columns (in their order), then y (a Series as
    ``target_column``; a DataFrame's columns under names that avoid x's).

    Args:
      pd: the pandas module.
      x: a DataFrame (copied, never changed).
      y: None, a Series or a DataFrame with x's index.
      target_column: the name of a Series ``y``'s column.

    Raises:
      TypeError: target_column is not a str.
      ValueError: x already has a column named target_column (when y is given), or x's
        and y's indexes differ.
    """
    if not isinstance(target_column, str):
        raise TypeError(f"target_column names the labels' column and should be a str, not {target_column!r}.")
    if len(x) == 0 or len(x.columns) == 0:
        raise ValueError(f"x has no rows or no columns to read (shape {x.shape}).")
    x = x.copy()
    target: str | dict[str, str] | None = None
    if y is not None:
        if target_column in x:
            raise ValueError(
                f"target_column {target_column!r} is already a column of x ({list(x.columns)}); pass "
                "another target_column."
            )
        if not np.array_equal(x.index, y.index):
            raise ValueError(f"x and y must have the same index.\nx index: {x.index}\ny index: {y.index}")
        if isinstance(y, pd.DataFrame):
            target = {}
            for column in y.columns:
                name = column
                while name in x.columns or name in target:
                    name = f"{name}_y"
                target[name] = column
                x[name] = y[column]
        else:
            target = target_column
            x[target_column] = y
    labels = set() if target is None else {target} if isinstance(target, str) else set(target)
    columns = {column: x[column].to_numpy() for column in x.columns}
    feature_keys = tuple(c for c in x.columns if c not in labels)
    return Table(columns, feature_keys, target)


def pandas_capacity(queue_capacity: int | None, shuffle: bool, rows: int) -> tuple[int, int]:
    """``(capacity, min_after_dequeue)`` of pandas_input_fn's queue: None means the
    rows (4x the rows when shuffling); at least a quarter stays in a shuffling queue."""
    if queue_capacity is None:
        queue_capacity = 4 * rows if shuffle else rows
    return queue_capacity, max(int(queue_capacity / 4), 1)
