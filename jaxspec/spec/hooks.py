"""The SessionRunHook protocol, as tf.estimator's hooks know it.

JAX has no ``tf.compat.v1.Session``: where TF passes one, hooks get a host-side stand-in
(``jaxspec.loop.hook_runner.HostSession``: ``session.state``, ``session.global_step``
and ``session.run(fetches)``), and ``fetches`` name values the compiled step returns
(``'loss'``, ``'global_step'``, prediction keys) instead of graph tensors. With
``iterations_per_loop > 1`` a hook runs once per loop, as TPUEstimator's do.

``session.state`` is valid while the hook runs: the training loop donates it to its next
loop (JAX's buffer donation, where TF kept variables in place), so a hook that keeps state
values past ``after_run`` copies them (``np.asarray``, ``jax.device_get``). A hook of
the user's own kind may read the state after any loop, so the next loop is dispatched
ahead of it (overlapping the hook's host work) only while a second copy of the state is
small (32 MiB per device on CPU, 1/16 of an accelerator's memory); a larger state waits
for the hook, so the devices still hold one state.

Step grouping (a JAX addition): a hook may say, through ``next_required_step``, which
global steps it must see. A plain Estimator then runs the steps between the ones any
hook needs as one compiled loop, and calls ``before_run``/``after_run`` once per loop
(at least at every step some hook asked for); a hook that does not say runs every step,
as in tf.estimator. ``RunConfig(steps_per_execution=1)`` turns grouping off.
"""

from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type-only: the loop sits above the contract layer
    from jaxspec.loop.hook_runner import HostSession

#: What ``next_required_step`` returns for a hook that needs no particular step (one
#: that triggers on time, or only acts in ``begin``/``end``): a step no training reaches.
NEVER = 2**62


class SessionRunHook:
    """Base class of hooks (``tf.estimator.SessionRunHook``); every method is a no-op.

    Call order over one ``train``/``evaluate``/``predict`` call: ``begin()`` once,
    ``after_create_session(session, coord)`` once (``session`` the HostSession, ``coord``
    None: no TF coordinator), then per step (per loop when ``iterations_per_loop > 1``)
    ``before_run(run_context)`` and ``after_run(run_context, run_values)``, and
    ``end(session)`` once at the end (the HostSession).
    """

    def begin(self) -> None:
        """Called once before the first step; the state may not exist yet."""

    def after_create_session(self, session: HostSession, coord: Any) -> None:
        """Called once the state exists (restored or initialised); ``session`` is the
        HostSession, ``coord`` None."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each step; return SessionRunArgs naming values to fetch."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each step with the fetched values in ``run_values.results``."""

    def end(self, session: HostSession) -> None:
        """Called once at the end of train/evaluate/predict (not after an exception)."""

    def next_required_step(self, global_step: int) -> int | None:
        """The next global step (> ``global_step``, the step before the coming run)
        after which this hook must get ``before_run``/``after_run`` (a JAX addition).

        None: every step (the default for a hook that overrides ``before_run`` or
        ``after_run``; a user's hook keeps tf.estimator's meaning). ``NEVER``: no
        particular step. The loop calls every hook at the end of each loop it runs, so a
        hook may be called at steps it did not ask for (it must then act as tf.estimator's
        would at that step); it is never called less often than it asks. The answer may
        be asked before the hook has seen the run ending at ``global_step``: it must hold
        assuming the hook is called at each step it asked for. ``run_context.iterations``
        says how many steps (tf.estimator runs) a call stands for.
        """
        overridden = any(
            name in vars(cls)
            for cls in type(self).__mro__
            if cls is not SessionRunHook and cls is not object
            for name in ("before_run", "after_run")
        )
        return None if overridden else NEVER

    def step_tensors(self) -> dict[str, Any]:
        """Arrays from model_fn this hook wants after each step (a JAX addition).

        TF hooks built inside model_fn fetch graph tensors; a compiled JAX step can only
        hand back what it returns. A hook in a spec's hook lists may return
        ``{name: array}`` here (arrays computed in model_fn); the step returns them and
        ``before_run`` can fetch them by ``name`` like ``'loss'``. On the mesh the value is
        replica 0's; with ``iterations_per_loop > 1``, the loop's last step's. Default: none.
        """
        return {}


class SessionRunArgs(namedtuple("SessionRunArgs", ["fetches", "feed_dict", "options"])):
    """What a hook asks of the next step (``tf.estimator.SessionRunArgs``).

    ``fetches`` is a name, or a list/tuple/dict of names, of values the step returns:
    ``'loss'``, ``'global_step'`` and, in PREDICT, the prediction keys. ``after_run``
    receives the same structure with numpy values. ``feed_dict`` and ``options`` exist for
    compatibility; a non-empty ``feed_dict`` raises ValueError at run time (a compiled
    step has nothing to feed).
    """

    def __new__(cls, fetches: Any, feed_dict: Any = None, options: Any = None) -> SessionRunArgs:
        return super().__new__(cls, fetches, feed_dict, options)


class SessionRunValues(namedtuple("SessionRunValues", ["results", "options", "run_metadata"])):
    """Results of one step for a hook (``tf.estimator.SessionRunValues``).

    ``results`` has the structure of the hook's ``SessionRunArgs.fetches``, holding numpy
    arrays; ``options`` and ``run_metadata`` are always ``None``.
    """


class SessionRunContext:
    """Context handed to ``before_run``/``after_run`` (``tf.train.SessionRunContext``).

    ``original_args`` is the SessionRunArgs of the step, ``session`` the HostSession the
    loop passes (None when constructed without one).
    ``request_stop()`` ends the loop after the current step (loop, with
    ``iterations_per_loop > 1``). ``iterations`` (a JAX addition) is the number of
    tf.estimator runs (steps) this run stands for: 1, or a grouped loop's step count.
    """

    def __init__(
        self,
        original_args: SessionRunArgs | None = None,
        session: HostSession | None = None,
        iterations: int = 1,
    ) -> None:
        self._original_args = original_args
        self._session = session
        self._stop_requested = False
        self._iterations = iterations

    @property
    def iterations(self) -> int:
        """How many tf.estimator runs (steps) this run stands for (>= 1): 1 unless a
        plain Estimator grouped steps no hook needed into one loop (a JAX addition)."""
        return self._iterations

    @property
    def original_args(self) -> SessionRunArgs | None:
        """The SessionRunArgs the step was run with."""
        return self._original_args

    @property
    def session(self) -> HostSession | None:
        """The HostSession (``state``, ``global_step``, ``run(fetches)``) the loop gave,
        or None: a compiled JAX step has no ``tf.compat.v1.Session``."""
        return self._session

    @property
    def stop_requested(self) -> bool:
        """Whether some hook has called ``request_stop()``."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Ask the loop to stop after the current step (or loop)."""
        self._stop_requested = True


def declared_step(hook: SessionRunHook, global_step: int) -> int | None:
    """``hook.next_required_step(global_step)``, or None (every step) for a hook whose
    class overrides ``before_run`` or ``after_run`` below the class that defines
    ``next_required_step``: a subclass of a jaxspec hook that changes what it does per
    step keeps tf.estimator's meaning."""
    for cls in type(hook).__mro__:
        if cls is SessionRunHook or "next_required_step" in vars(cls):
            break
        if "before_run" in vars(cls) or "after_run" in vars(cls):
            return None
    step = hook.next_required_step(global_step)
    return None if step is None else int(step)


def required_step(hook: SessionRunHook, global_step: int) -> int:
    """The next global step after which ``hook`` must run: ``declared_step``, with
    ``global_step + 1`` for "every step"."""
    step = declared_step(hook, global_step)
    return global_step + 1 if step is None else max(step, global_step + 1)
