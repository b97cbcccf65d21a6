"""Call user functions (model_fn, input_fn, init_fn) with the arguments they declare."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


def fn_args(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Names of ``fn``'s parameters that can be passed by name (``self`` of a bound method
    and ``*args``/``**kwargs`` excluded; a ``functools.partial``'s bound ones too)."""
    if isinstance(fn, functools.partial):
        bound = set(fn.keywords or {})
        names = fn_args(fn.func)[len(fn.args) :]
        return tuple(n for n in names if n not in bound)
    sig = inspect.signature(fn)
    return tuple(
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
    )


def check_declared_args(
    fn: Callable[..., Any], allowed: tuple[str, ...], fn_name: str, required: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Return ``fn``'s argument names after checking them against ``allowed``.

    Raises:
      ValueError: ``fn`` declares an argument not in ``allowed``, or lacks one of ``required``.
    """
    names = fn_args(fn)
    for name in required:
        if name not in names:
            raise ValueError(f"{fn_name} must take an argument named {name!r}; it takes {names}.")
    for name in names:
        if name not in allowed:
            raise ValueError(f"{fn_name} takes an argument {name!r}, which is not one of {allowed}.")
    return names


def call_with_declared(fn: Callable[..., Any], available: dict[str, Any]) -> Any:
    """Call ``fn`` with the entries of ``available`` whose names it declares."""
    names = fn_args(fn)
    return fn(**{name: available[name] for name in names if name in available})
