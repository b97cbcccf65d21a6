"""Integer arguments, checked as tf.estimator checks them (TypeError for a non-integer,
ValueError for a value out of range, the argument named)."""

from __future__ import annotations

import numbers
from typing import TypeGuard


def is_int(value: object, allow_bool: bool = True) -> TypeGuard[numbers.Integral]:
    """True for a Python or numpy integer (a ``numbers.Integral``). ``bool`` counts unless
    ``allow_bool`` is False (TPUEstimator's batch sizes refuse it, as TF does)."""
    if isinstance(value, bool):
        return allow_bool
    return isinstance(value, numbers.Integral)


def check_positive_int(value: object, name: str, allow_bool: bool = True) -> int:
    """Return ``value`` as an int if it is an integer > 0.

    Raises:
      TypeError: not an integer (a float such as ``1.0`` included; a bool too when
        ``allow_bool`` is False).
      ValueError: zero or negative.
    """
    if not is_int(value, allow_bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}.")
    return int(value)


def check_nonnegative_int(value: object, name: str) -> int:
    """Return ``value`` as an int if it is an integer >= 0 (TypeError / ValueError
    otherwise, as ``check_positive_int``)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}.")
    return int(value)
