"""Small checks shared by the spec classes, export outputs, configs and Estimators.

No TensorFlow import; ``jax`` is imported lazily where it is needed.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from jaxspec.rules.numbers import check_nonnegative_int, check_positive_int, is_int

__all__ = [
    "check_nonnegative_int",
    "check_positive_int",
    "is_array",
    "is_dense_array",
    "is_floating",
    "is_int",
    "is_number_leaf",
    "is_sparse",
    "is_string_array",
    "type_name",
]


def is_array(x: Any) -> bool:
    """True for a dense JAX array (tracers included), a numpy array or a numpy scalar."""
    if isinstance(x, (np.ndarray, np.generic)):
        return True
    try:
        import jax
    except ImportError:  # pragma: no cover - jax is a dependency
        return False
    return isinstance(x, jax.Array)


def is_sparse(x: Any) -> bool:
    """True for sparse arrays (jax.experimental.sparse, scipy.sparse, tf.SparseTensor)."""
    name = type(x).__name__
    module = type(x).__module__ or ""
    return "sparse" in module or name in ("BCOO", "BCSR", "SparseTensor", "SparseTensorValue")


def is_dense_array(x: Any) -> bool:
    """``is_array(x)`` and not sparse: what a spec accepts for loss and predictions."""
    return is_array(x) and not is_sparse(x)


def is_floating(x: Any) -> bool:
    """True when the array's dtype is a floating type (bfloat16 included)."""
    return np.issubdtype(np.dtype(x.dtype), np.floating) or str(x.dtype) == "bfloat16"


def is_string_array(x: Any) -> bool:
    """True for a numpy array (or list) of str/bytes: JAX has no string dtype."""
    if isinstance(x, (list, tuple)):
        return len(x) > 0 and all(isinstance(v, (str, bytes)) for v in x)
    return isinstance(x, np.ndarray) and x.dtype.kind in ("U", "S", "O")


def is_number_leaf(x: Any) -> bool:
    """True for a leaf a state pytree may hold: an array or a Python/numpy number."""
    if isinstance(x, (str, bytes)):
        return False
    return is_array(x) or isinstance(x, numbers.Number)


def type_name(x: Any) -> str:
    """The name of ``x``'s type, for error messages."""
    return type(x).__name__
