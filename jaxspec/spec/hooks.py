"""The SessionRunHook protocol, as tf.estimator's hooks know it.

JAX has no ``tf.compat.v1.Session``: where TF passes one, hooks get a host-side stand-in
(a ``Session``: ``session.state``, ``session.global_step`` and ``session.run(fetches)``;
the loop's ``HostSession`` is one), and ``fetches`` name values the compiled step returns
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

What a hook needs of the state (a JAX addition, next to ``next_required_step``): the
loop asks each hook, never its class, and a hook that does not answer gets the safe
answer (a SessionRunHook subclass without these methods; as in tf.estimator, ``hooks``
must be SessionRunHooks, anything else is a TypeError):

- ``reads_state_after(step)``: whether the hook may read ``session.state`` after the
  run that ends at global step ``step``. Default True. Where every hook answers False
  (and none may stop there), the next loop is dispatched ahead and takes that state
  (donated: one state on the devices); a hook that answers True itself is waited for
  (its read comes first, the devices still hold one state); a hook that does not
  answer may read after any loop, so the loop ahead keeps the state where a second
  copy is small, and waits for the hook otherwise.
- ``may_stop_after(step)``: whether the hook may call ``request_stop()`` after the run
  ending at ``step`` (a stop keeps the state of its step, so that state is not given
  to a loop ahead). Default True.
- ``last_step()``: the global step at which the hook ends training, when it knows one
  (every loop then ends there at the latest, as StopAtStepHook's); default None.

A subclass of a jaxspec hook that overrides ``before_run`` or ``after_run`` below the
class that answers gets the safe answers again (it may read or stop anywhere), as for
``next_required_step``. A user's hook opts in by answering::

    class LogLossEvery100(jaxspec.SessionRunHook):
        def next_required_step(self, global_step):
            return (global_step // 100 + 1) * 100

        def reads_state_after(self, step):
            return False  # it reads the loss, never session.state

        def may_stop_after(self, step):
            return False  # it never calls request_stop()

        def before_run(self, run_context):
            return jaxspec.SessionRunArgs("loss")

        def after_run(self, run_context, run_values):
            print(run_context.session.global_step, run_values.results)

With only such hooks (and jaxspec's own), a plain Estimator's loops overlap: loop k+1
runs on the devices while the host handles loop k.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Session(Protocol):
    """What a hook may touch where TF passes a ``tf.compat.v1.Session``: the loop's
    ``HostSession`` has these three members (the contract names no loop class).

    - ``state``: the state pytree at ``global_step`` (a JAX addition: hooks that save or
      inspect the model read it instead of variables); None while a loop dispatched
      ahead holds it (donated).
    - ``global_step``: the current global step (int).
    - ``run(fetches)``: ``fetches`` (a name, or a list/tuple/dict of names, as TF's
      ``Session.run`` takes tensors) resolved to the latest numpy values the step
      returned (``'global_step'``, ``'loss'``, the hook's ``step_tensors()`` names).
    """

    @property
    def state(self) -> Any: ...

    @property
    def global_step(self) -> int: ...

    def run(self, fetches: Any) -> Any: ...


#: What ``next_required_step`` returns for a hook that needs no particular step (one
#: that triggers on time, or only acts in ``begin``/``end``): a step no training reaches.
NEVER = 2**62


class SessionRunHook:
    """Base class of hooks (``tf.estimator.SessionRunHook``); every method is a no-op.

    Call order over one ``train``/``evaluate``/``predict`` call: ``begin()`` once,
    ``after_create_session(session, coord)`` once (``session`` the Session, ``coord``
    None: no TF coordinator), then per step (per loop when ``iterations_per_loop > 1``)
    ``before_run(run_context)`` and ``after_run(run_context, run_values)``, and
    ``end(session)`` once at the end (the Session).
    """

    def begin(self) -> None:
        """Called once before the first step; the state may not exist yet."""

    def after_create_session(self, session: Session, coord: Any) -> None:
        """Called once the state exists (restored or initialised); ``session`` is a
        ``Session``, ``coord`` None."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each step; return SessionRunArgs naming values to fetch."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each step with the fetched values in ``run_values.results``."""

    def end(self, session: Session) -> None:
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

    def reads_state_after(self, step: int) -> bool:
        """Whether this hook may read ``session.state`` after the run that ends at
        global step ``step`` (in ``after_run``, or the ``before_run`` after it); a JAX
        addition. The default, True, is the safe answer; a hook that answers False for a
        step lets the loop give that state to the next loop before the hook runs
        (donation, overlapping the hook's host work with the devices). Asked before the
        hook has seen that run; the answer must hold for it."""
        return True

    def may_stop_after(self, step: int) -> bool:
        """Whether this hook may call ``run_context.request_stop()`` after the run that
        ends at global step ``step`` (a JAX addition). Default True (safe): a stop keeps
        the state of its step, so that state is not given to a loop dispatched ahead."""
        return True

    def last_step(self) -> int | None:
        """The global step at which this hook ends training, once known (a JAX
        addition; StopAtStepHook's): no loop runs past it. Default None (no bound)."""
        return None

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

    ``original_args`` is the SessionRunArgs of the step, ``session`` the Session the
    loop passes (None when constructed without one).
    ``request_stop()`` ends the loop after the current step (loop, with
    ``iterations_per_loop > 1``). ``iterations`` (a JAX addition) is the number of
    tf.estimator runs (steps) this run stands for: 1, or a grouped loop's step count.
    """

    def __init__(
        self,
        original_args: SessionRunArgs | None = None,
        session: Session | None = None,
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
    def session(self) -> Session | None:
        """The ``Session`` (``state``, ``global_step``, ``run(fetches)``) the loop gave,
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


def _answers(hook: Any, method: str) -> bool:
    """Whether ``hook`` answers ``method`` itself: its class (or a base below
    SessionRunHook) defines it, and no class below that one overrides ``before_run`` or
    ``after_run`` (a subclass that changes what a hook does per step loses its answers).
    False for an object without the method and for SessionRunHook's defaults."""
    if not callable(getattr(hook, method, None)):
        return False
    for cls in type(hook).__mro__:
        if cls is SessionRunHook or cls is object:
            return False
        if method in vars(cls):
            return True
        if "before_run" in vars(cls) or "after_run" in vars(cls):
            return False
    return False


def reads_state(hook: Any, step: int) -> bool | None:
    """``hook.reads_state_after(step)`` as a bool, or None where the hook gives no
    answer of its own (``_answers``): it may read the state after any run."""
    return bool(hook.reads_state_after(step)) if _answers(hook, "reads_state_after") else None


def may_stop(hook: Any, step: int) -> bool:
    """``hook.may_stop_after(step)``, or True where the hook gives no answer of its own."""
    return bool(hook.may_stop_after(step)) if _answers(hook, "may_stop_after") else True


def stop_step(hook: Any) -> int | None:
    """``hook.last_step()`` (None for a hook without the method): the step it ends
    training at. Asked of any hook that has it, a subclass's too (a bound on the loops,
    not a promise about what the hook does per step)."""
    last = getattr(hook, "last_step", None)
    value = last() if callable(last) else None
    return None if value is None else int(value)
