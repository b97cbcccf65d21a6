"""The SessionRunHook protocol, as tf.estimator's hooks know it.

JAX has no ``tf.compat.v1.Session``: where TF passes one, hooks get a host-side stand-in
(``jaxspec.loop.hook_runner.HostSession``: ``session.state``, ``session.global_step``
and ``session.run(fetches)``), and ``fetches`` name values the compiled step returns
(``'loss'``, ``'global_step'``, prediction keys) instead of graph tensors. With
``iterations_per_loop > 1`` a hook runs once per loop, as TPUEstimator's do.

``session.state`` is valid while the hook runs: the training loop donates it to its next
loop (JAX's buffer donation, where TF kept variables in place), so a hook that keeps state
values past ``after_run`` copies them (``np.asarray``, ``jax.device_get``).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any


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

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Called once the state exists (restored or initialised); ``session`` is the
        HostSession, ``coord`` None."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each step; return SessionRunArgs naming values to fetch."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each step with the fetched values in ``run_values.results``."""

    def end(self, session: Any) -> None:
        """Called once at the end of train/evaluate/predict (not after an exception)."""

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
    ``iterations_per_loop > 1``).
    """

    def __init__(self, original_args: SessionRunArgs | None = None, session: Any = None) -> None:
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self) -> SessionRunArgs | None:
        """The SessionRunArgs the step was run with."""
        return self._original_args

    @property
    def session(self) -> Any:
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
