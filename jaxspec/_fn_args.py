"""Which arguments a user function (model_fn, input_fn, init_fn, host_call's fn) declares,
and calling it with exactly those: the one owner of tf.estimator's argument counting."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any


def fn_arg_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Names of ``fn``'s named parameters (positional and keyword-only), in order.

    ``self`` of a bound method, ``*args`` and ``**kwargs`` are left out, and so are the
    arguments a ``functools.partial`` already binds, which is how tf.estimator counts a
    function's arguments.
    """
    if isinstance(fn, functools.partial):
        bound = set(fn.keywords or {})
        names = fn_arg_names(fn.func)[len(fn.args) :]
        return tuple(n for n in names if n not in bound)
    params = inspect.signature(fn).parameters.values()
    return tuple(
        p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def takes_varargs(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` (or the function a partial wraps) declares ``*args``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())


def check_declared_args(
    fn: Callable[..., Any], allowed: tuple[str, ...], fn_name: str, required: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Return ``fn``'s argument names after checking them against ``allowed``.

    Raises:
      ValueError: ``fn`` declares an argument not in ``allowed``, or lacks one of
        ``required`` (the function and the argument are named).
    """
    names = fn_arg_names(fn)
    for name in required:
        if name not in names:
            raise ValueError(f"{fn_name} must take an argument named {name!r}; it takes {names}.")
    for name in names:
        if name not in allowed:
            raise ValueError(f"{fn_name} takes an argument {name!r}, which is not one of {allowed}.")
    return names


def call_with_declared(
    fn: Callable[..., Any], available: Mapping[str, Any], names: tuple[str, ...] | None = None
) -> Any:
    """Call ``fn`` by name with the entries of ``available`` it declares (``names``, when
    the caller has already counted them, else ``fn_arg_names(fn)``)."""
    names = fn_arg_names(fn) if names is None else names
    return fn(**{name: available[name] for name in names if name in available})
