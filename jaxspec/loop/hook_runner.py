"""Run SessionRunHooks around compiled loops: fetch names resolved to step values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import numpy as np

from jaxspec.engine.multihost import to_host
from jaxspec.loop import watchdog
from jaxspec.spec.hooks import (
    NEVER,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    declared_step,
    required_step,
)


def resolve_fetches(fetches: Any, values: dict[str, Any]) -> Any:
    """``fetches`` (a name, or a list/tuple/dict of names) with each name replaced by its
    value from ``values``.

    Raises:
      ValueError: a name is not among ``values``.
      TypeError: a fetch is not a name.
    """
    if fetches is None:
        return None
    if isinstance(fetches, str):
        if fetches not in values:
            raise ValueError(f"a hook asked to fetch {fetches!r}; available values are {sorted(values)}.")
        return values[fetches]
    if isinstance(fetches, dict):
        return {k: resolve_fetches(v, values) for k, v in fetches.items()}
    if isinstance(fetches, (list, tuple)):
        return type(fetches)(resolve_fetches(v, values) for v in fetches)
    raise TypeError(
        f"SessionRunArgs.fetches must name values ('loss', 'global_step', ...), got {type(fetches).__name__}."
    )


class HostSession:
    """What jaxspec passes where TF passes a ``tf.compat.v1.Session`` to hooks.

    ``run(fetches)`` resolves names (``'global_step'`` always; ``'loss'`` and the hook's
    own ``step_tensors()`` names after a step) to their latest numpy values. ``state`` is
    the current state pytree (a JAX addition: hooks that save or inspect the model read
    it instead of variables; None while a loop dispatched ahead holds it), and
    ``global_step`` the current global step (int): both read from the call's
    StateLifecycle, the one owner of the state; the session keeps no copy.

    Args:
      lifecycle: the call's StateLifecycle (anything with ``state`` and
        ``global_step``), or None (no state: ``state`` None, ``global_step`` 0).
      values: the latest values, shared with other views of this session.
      own: a hook's own step tensor values, for its view in ``end``.
    """

    def __init__(
        self, lifecycle: Any = None, values: dict[str, Any] | None = None, own: dict[str, Any] | None = None
    ) -> None:
        self._lifecycle = lifecycle
        self._values: dict[str, Any] = {} if values is None else values
        self._own = own

    @property
    def state(self) -> Any:
        """The state at ``global_step`` (the lifecycle's), or None."""
        return None if self._lifecycle is None else self._lifecycle.state

    @property
    def global_step(self) -> int:
        """The current global step (the lifecycle's)."""
        return 0 if self._lifecycle is None else int(self._lifecycle.global_step)

    def for_hook(self, own: dict[str, Any] | None) -> HostSession:
        """This session as one hook sees it in ``end``: its ``run`` also resolves that
        hook's own step tensors (``own``); the latest values are shared, not copied."""
        return HostSession(self._lifecycle, self._values, own)

    def update(self, values: dict[str, Any]) -> None:
        """Record the latest values (numpy) of a step or loop."""
        self._values.update(values)

    def values_for(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The fetchable values, plus one hook's own ``extra`` values."""
        return {**self._values, "global_step": np.asarray(self.global_step), **(extra or {})}

    def run(self, fetches: Any, extra: dict[str, Any] | None = None) -> Any:
        """Resolve ``fetches`` against the latest values (and a hook's own ``extra``)."""
        return resolve_fetches(fetches, self.values_for(self._own if extra is None else extra))


class HookRunner:
    """Calls the hooks of one train/evaluate/predict call in tf.estimator's order.

    Order: ``hooks`` (the user's), then the spec's hooks, then ``after`` (the
    Estimator's own, e.g. its checkpoint saver).

    Args:
      hooks: the user's hooks.
      spec_hooks: the spec's hooks for this mode, aligned with the step's hook values
        (``SpecParts.all_hooks``); ``chief_count`` of them, at the end, are chief-only and
        run on process 0 only.
      after: hooks that run last.
      lifecycle: the call's StateLifecycle: the session's ``state`` and
        ``global_step`` are read from it (the runner keeps no copy).
    """

    def __init__(
        self,
        hooks: Iterable[SessionRunHook],
        spec_hooks: Iterable[SessionRunHook] = (),
        chief_count: int = 0,
        after: Iterable[SessionRunHook] = (),
        lifecycle: Any = None,
    ) -> None:
        spec = list(spec_hooks)
        chief = jax.process_index() == 0
        entries: list[tuple[SessionRunHook, int | None]] = [(h, None) for h in hooks]
        entries += [(h, i) for i, h in enumerate(spec) if chief or i < len(spec) - chief_count]
        entries += [(h, None) for h in after]
        for h, _ in entries:
            if not isinstance(h, SessionRunHook):
                raise TypeError(f"hooks must be SessionRunHooks, got {type(h).__name__}.")
        self._entries = entries
        self.hooks = [h for h, _ in entries]
        self.session = HostSession(lifecycle)
        self._spec_values: list[dict[str, Any]] = [{} for _ in spec]
        self._args: list[SessionRunArgs | None] = []
        self._context: SessionRunContext | None = None

    def begin(self) -> None:
        """``begin()`` on every hook, in order."""
        for h in self.hooks:
            h.begin()

    def after_create_session(self) -> None:
        """``after_create_session(session, None)`` on every hook once the state exists."""
        for h in self.hooks:
            h.after_create_session(self.session, None)

    def next_needed_step(self, global_step: int) -> int:
        """The first global step after ``global_step`` at which some hook must run
        (``global_step + 1`` when one runs every step; NEVER when none needs a step)."""
        return min((required_step(h, global_step) for h in self.hooks), default=NEVER)

    def some_hook_runs_every_step(self, global_step: int) -> bool:
        """Whether a hook asks for every step (a user's hook without
        ``next_required_step``, say): grouping would then only make loops of one step."""
        return any(declared_step(h, global_step) is None for h in self.hooks)

    def before_run(self, iterations: int = 1) -> None:
        """Ask each hook what it wants from the coming step (or loop); ``iterations``:
        the tf.estimator runs (steps) that loop stands for (``run_context.iterations``)."""
        self._context = SessionRunContext(
            original_args=SessionRunArgs(fetches=None), session=self.session, iterations=iterations
        )
        self._args = []
        for h in self.hooks:
            watchdog.mark(watchdog.HOOK, f"{type(h).__name__}.before_run")
            args = h.before_run(self._context)
            if args is not None and args.feed_dict:
                raise ValueError(
                    "SessionRunArgs.feed_dict is not supported: a compiled step has nothing to feed."
                )
            self._args.append(args)

    def after_run(
        self,
        values: dict[str, Any],
        spec_values: list[dict[str, Any]] | None = None,
        iterations: int | None = None,
    ) -> bool:
        """Hand each hook its fetched values; return True if a hook requested a stop.
        The session's state and global step are the lifecycle's, as the loop left them.

        ``spec_values`` holds, per spec hook, its ``step_tensors()`` values (numpy).
        ``iterations``: the steps the run actually stood for, when fewer than
        ``before_run`` was told (a grouped loop a SIGTERM cut short).
        """
        assert self._context is not None
        if iterations is not None and iterations != self._context.iterations:
            self._context._iterations = iterations  # the runner's own context, made in before_run
        self.session.update({k: np.asarray(v) for k, v in values.items()})
        if spec_values is not None:
            self._spec_values = spec_values
        for (h, index), args in zip(self._entries, self._args, strict=True):
            extra = self._spec_values[index] if index is not None else None
            results = self.session.run(args.fetches, extra) if args is not None else None
            watchdog.mark(watchdog.HOOK, f"{type(h).__name__}.after_run")
            h.after_run(self._context, SessionRunValues(results=results, options=None, run_metadata=None))
        return self._context.stop_requested

    def end(self) -> None:
        """``end(session)`` on every hook; a hook's ``session.run`` sees its own values."""
        for h, index in self._entries:
            extra = self._spec_values[index] if index is not None else None
            watchdog.mark(watchdog.HOOK, f"{type(h).__name__}.end")
            h.end(self.session.for_hook(extra))


def last_step_values(hook_values: Any) -> list[dict[str, np.ndarray]]:
    """Per spec hook, each step tensor's value at the loop's last step on replica 0
    (gathered from every process when the mesh spans several)."""
    return to_host(jax.tree.map(lambda x: x[-1, 0], hook_values))
