"""``(fn, tensors)`` pairs, TPUEstimatorSpec's host_call/eval_metrics and
NPUEstimatorSpec's host_call: their validation and how ``fn`` is called, the same for
jaxspec's specs and tf_bridge's (pure Python)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias, TypeVar

from jaxspec._fn_args import fn_arg_names, takes_varargs
from jaxspec.rules.spec_fields import type_name

R = TypeVar("R")
# A checked pair: ``fn`` and its tensors, a list/tuple (``fn(*tensors)``) or a dict
# (``fn(**tensors)``) of arrays or tensors.
FnTensors: TypeAlias = tuple[Callable[..., object], list[object] | tuple[object, ...] | dict[str, object]]


def validate_fn_tensors_pair(value: object, field: str, cls: str) -> FnTensors:
    """Check a ``(fn, tensors)`` pair as TPUEstimator (and Ascend's adapter) do; return it
    as a tuple.

    ``tensors`` is a list/tuple (``fn(*tensors)``) or a dict (``fn(**tensors)``). For a
    list/tuple, its length must equal the number of named arguments ``fn`` declares
    (positional and keyword-only, ``self`` not counted), unless ``fn`` takes ``*args``:
    tf.estimator's rule.

    Raises:
      ValueError: ``value`` is not a tuple/list, does not have two elements, or its
        tensors are not a list, tuple or dict.
      TypeError: the first element is not callable.
      RuntimeError: the number of tensors does not match fn's arguments (TPUEstimator
        raises RuntimeError here).
    """
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"{cls}.{field} must be a tuple or list (fn, tensors), got {type_name(value)}.")
    if len(value) != 2:
        raise ValueError(f"{cls}.{field} must have exactly two elements (fn, tensors), got {len(value)}.")
    fn, tensors = value
    if not callable(fn):
        raise TypeError(f"{cls}.{field}[0] must be callable, got {type_name(fn)}.")
    if not isinstance(tensors, (tuple, list, dict)):
        raise ValueError(
            f"{cls}.{field}[1] must be a list, tuple or dict of arrays, got {type_name(tensors)}."
        )
    if isinstance(tensors, (tuple, list)):
        try:
            names, varargs = fn_arg_names(fn), takes_varargs(fn)
        except (TypeError, ValueError):  # no signature (some builtins): cannot check
            return (fn, tensors)
        if not varargs and len(names) != len(tensors):
            raise RuntimeError(
                f"{cls}.{field} passes {len(tensors)} tensors, but {field}[0] declares "
                f"{len(names)} arguments {names}."
            )
    return (fn, tensors)


def call_with_tensors(fn: Callable[..., R], tensors: Sequence[object] | Mapping[str, object]) -> R:
    """Call ``fn(*tensors)`` for a list/tuple, ``fn(**tensors)`` for a dict."""
    if isinstance(tensors, dict):
        return fn(**tensors)
    return fn(*tensors)
