"""``npu_bridge.estimator.npu.npu_scope`` on tf_bridge's CPU path: the adapter's scopes
mark the ops built inside them with attributes for the NPU's graph compiler (not compiled
for the NPU, variable placement, kept precision, pipeline stage). TensorFlow's CPU runtime
has no such compiler, so each scope builds its body unchanged (the adapter's argument
checks are kept).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

__all__ = [
    "NpuExecutePlacement",
    "keep_dtype_scope",
    "npu_stage_scope",
    "npu_variable_scope",
    "without_npu_compile_scope",
]


class NpuExecutePlacement(enum.Enum):
    """Where the NPU places a scope's variables (the adapter's ``npu_config`` enum)."""

    ALL = "all"
    CUBE = "cube"
    VECTOR = "vector"
    TAISHAN = "taishan"
    DVPP = "dvpp"


@contextlib.contextmanager
def without_npu_compile_scope() -> Iterator[None]:
    """Ops built inside are not compiled for the NPU by the adapter; on CPU: a no-op."""
    yield


@contextlib.contextmanager
def npu_variable_scope(placement: NpuExecutePlacement = NpuExecutePlacement.ALL) -> Iterator[None]:
    """The adapter places the scope's variables per ``placement``; on CPU: a no-op.

    Raises:
      ValueError: ``placement`` is not an ``NpuExecutePlacement`` (as the adapter).
    """
    if not isinstance(placement, NpuExecutePlacement):
        raise ValueError(
            f"npu_variable_scope: placement must be an NpuExecutePlacement member; got {placement!r}."
        )
    yield


@contextlib.contextmanager
def keep_dtype_scope() -> Iterator[None]:
    """The adapter keeps the scope's ops at their own precision; on CPU (no mixed
    precision rewrite) a no-op."""
    yield


@contextlib.contextmanager
def npu_stage_scope(stage: int) -> Iterator[None]:
    """The adapter tags the scope's ops with pipeline stage ``stage``; on CPU: a no-op.

    Raises:
      TypeError: ``stage`` is not an int (the adapter's attribute is an int).
    """
    if not isinstance(stage, int) or isinstance(stage, bool):
        raise TypeError(f"npu_stage_scope: stage must be an int; got {type(stage).__name__}.")
    yield
