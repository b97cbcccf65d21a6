"""Validation of ``(fn, tensors)`` pairs: TPUEstimatorSpec's host_call/eval_metrics and
NPUEstimatorSpec's host_call."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from jaxspec.spec.hooks import SessionRunHook


def _positional_arity(fn: Callable[..., Any]) -> tuple[int, bool]:
    """(number of positional parameters, whether fn takes *args); ``self`` not counted."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional), varargs


def validate_fn_tensors_pair(value: Any, field: str, cls: str, arity_check: bool = True) -> tuple[Callable[..., Any], Any]:
    """Check a ``(fn, tensors)`` pair as TPUEstimator does and return it as a tuple.

    Raises:
      ValueError: not a tuple/list, not two elements, or tensors not a list/tuple/dict.
      TypeError: the first element is not callable.
      RuntimeError: a list/tuple of tensors whose length differs from fn's positional
        parameters (skipped when fn takes ``*args``), the type TPUEstimator raises.
    """
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"{cls}: {field} must be a tuple or list (fn, tensors), got {type(value).__name__}.")
    if len(value) != 2:
        raise ValueError(f"{cls}: {field} must have two elements (fn, tensors), got {len(value)}.")
    fn, tensors = value
    if not callable(fn):
        raise TypeError(f"{cls}: {field}[0] must be callable, got {type(fn).__name__}.")
    if not isinstance(tensors, (tuple, list, dict)):
        raise ValueError(f"{cls}: {field}[1] must be a list, tuple or dict of arrays, got {type(tensors).__name__}.")
    if arity_check and isinstance(tensors, (tuple, list)):
        n, varargs = _positional_arity(fn)
        if not varargs and n != len(tensors):
            raise RuntimeError(
                f"{cls}: {field} passes {len(tensors)} tensors but {field}[0] takes {n} positional arguments."
            )
    return (fn, tensors)


def call_with_tensors(fn: Callable[..., Any], tensors: Any) -> Any:
    """Call ``fn(*tensors)`` for a list/tuple, ``fn(**tensors)`` for a dict."""
    if isinstance(tensors, dict):
        return fn(**tensors)
    return fn(*tensors)


class HostCallHook(SessionRunHook):
    """Carries a ``(host_fn, tensors)`` pair through an EstimatorSpec's hooks.

    ``TPUEstimatorSpec.as_estimator_spec()`` turns ``host_call`` into this hook, as
    TPUEstimator does on CPU; the engine returns ``tensors`` from each step and calls
    ``host_fn`` on the host once per step, in step order, with numpy arrays.
    """

    def __init__(self, host_call: tuple[Callable[..., Any], Any]) -> None:
        self.host_call = host_call
