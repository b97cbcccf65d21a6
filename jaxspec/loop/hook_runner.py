"""Run SessionRunHooks around compiled loops: fetch names resolved to step values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from jaxspec.spec.hooks import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues


def _resolve(fetches: Any, values: dict[str, Any]) -> Any:
    if fetches is None:
        return None
    if isinstance(fetches, str):
        if fetches not in values:
            raise ValueError(f"a hook asked to fetch {fetches!r}; available values are {sorted(values)}.")
        return values[fetches]
    if isinstance(fetches, dict):
        return {k: _resolve(v, values) for k, v in fetches.items()}
    if isinstance(fetches, (list, tuple)):
        return type(fetches)(_resolve(v, values) for v in fetches)
    raise TypeError(f"SessionRunArgs.fetches must name values ('loss', 'global_step', ...), got {fetches!r}.")


class HookRunner:
    """Calls the hooks of one train/evaluate/predict call in tf.estimator's order."""

    def __init__(self, hooks: Iterable[SessionRunHook]) -> None:
        self.hooks = list(hooks)
        self._args: list[SessionRunArgs | None] = []
        self._context: SessionRunContext | None = None

    def begin(self) -> None:
        """``begin()`` then ``after_create_session(None, None)`` on every hook."""
        for h in self.hooks:
            h.begin()

    def after_create_session(self) -> None:
        """``after_create_session(None, None)`` on every hook."""
        for h in self.hooks:
            h.after_create_session(None, None)

    def before_run(self) -> None:
        """Ask each hook what it wants from the coming step (or loop)."""
        self._context = SessionRunContext(original_args=SessionRunArgs(fetches=None))
        self._args = []
        for h in self.hooks:
            args = h.before_run(self._context)
            if args is not None and args.feed_dict:
                raise ValueError("SessionRunArgs.feed_dict is not supported: a compiled step has nothing to feed.")
            self._args.append(args)

    def after_run(self, values: dict[str, Any]) -> bool:
        """Hand each hook its fetched values; return True if a hook requested a stop."""
        assert self._context is not None
        values = {k: np.asarray(v) for k, v in values.items()}
        for h, args in zip(self.hooks, self._args, strict=True):
            results = _resolve(args.fetches, values) if args is not None else None
            h.after_run(self._context, SessionRunValues(results=results, options=None, run_metadata=None))
        return self._context.stop_requested

    def end(self) -> None:
        """``end(None)`` on every hook."""
        for h in self.hooks:
            h.end(None)
