"""Small type checks shared by the spec classes and export outputs (no TF import)."""

from __future__ import annotations

from typing import Any

import numpy as np


def is_array(x: Any) -> bool:
    """True for a dense JAX array (tracers included) or numpy array; False otherwise."""
    if isinstance(x, np.ndarray):
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
    return (
        "sparse" in module
        or name in ("BCOO", "BCSR", "SparseTensor", "SparseTensorValue")
    )


def is_floating(x: Any) -> bool:
    """True when the array's dtype is a floating type (bfloat16 included)."""
    return np.issubdtype(np.dtype(x.dtype), np.floating) or str(x.dtype) == "bfloat16"


def is_string_array(x: Any) -> bool:
    """True for a numpy array (or list) of str/bytes: JAX has no string dtype."""
    if isinstance(x, (list, tuple)):
        return len(x) > 0 and all(isinstance(v, (str, bytes)) for v in x)
    return isinstance(x, np.ndarray) and x.dtype.kind in ("U", "S", "O")


def type_name(x: Any) -> str:
    """The name of ``x``'s type, for error messages."""
    return type(x).__name__
