"""Session hooks tf.estimator had and ``tf.compat.v1.train`` lacks.

``tf.compat.v1.train`` still has CheckpointSaverHook, LoggingTensorHook, NanTensorHook,
StepCounterHook, StopAtStepHook, SummarySaverHook, FinalOpsHook, ProfilerHook, ...; use
them as they are. This module adds the ones that lived in tf.estimator:

- early stopping: ``make_early_stopping_hook``, ``stop_if_higher_hook``,
  ``stop_if_lower_hook``, ``stop_if_no_increase_hook``, ``stop_if_no_decrease_hook``,
  ``read_eval_metrics`` (``tf.estimator.experimental``; the conditions and the
  ``stop_if_*`` factories are ``jaxspec.rules.early_stopping``'s, shared with jaxspec);
- ``make_stop_at_checkpoint_step_hook``: every task of a cluster stops at the chief's
  last checkpoint step (``tf.estimator.experimental``);
- ``InMemoryEvaluatorHook``: evaluation during training from the session's variables
  (``tf.estimator.experimental``; defined in ``tf_bridge.runtime.runner.in_memory``);
- the hooks the runner adds by itself, re-exported from ``tf_bridge.runtime.runner_hooks``:
  ``HostCallFetchHook``, ``StopAfterNEvalsHook``, ``ExamplesPerSecondHook``.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable
from typing import TypeAlias

import tensorflow as tf
from tensorflow.python.training import training_util

from jaxspec.rules.early_stopping import EarlyStoppingFactories
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.in_memory import InMemoryEvaluatorHook
from tf_bridge.runtime.runner.train import load_global_step
from tf_bridge.runtime.runner_hooks import ExamplesPerSecondHook, HostCallFetchHook, StopAfterNEvalsHook

_log = logging.getLogger("tf_bridge")
_SessionRunHook: TypeAlias = tf.compat.v1.train.SessionRunHook
_RunContext: TypeAlias = tf.compat.v1.train.SessionRunContext
_RunValues: TypeAlias = tf.compat.v1.train.SessionRunValues
_RunArgs: TypeAlias = tf.compat.v1.train.SessionRunArgs


def _stop_variable() -> tf.Variable:
    """The bool variable ``signal_early_stopping/STOP`` (a global variable, so the chief
    and the workers of a cluster share it on the parameter servers and checkpoints keep
    it, as tf.estimator's); made once per graph."""
    with tf.compat.v1.variable_scope("signal_early_stopping", values=[], reuse=tf.compat.v1.AUTO_REUSE):
        return tf.compat.v1.get_variable(
            "STOP",
            shape=[],
            dtype=tf.bool,
            initializer=tf.compat.v1.constant_initializer(False),
            collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES],
            trainable=False,
        )


class _StopOnPredicateHook(_SessionRunHook):
    """The chief's early-stopping hook: calls ``should_stop_fn`` every N steps or
    seconds; when it says so, sets the stop variable (for the workers) and stops."""

    def __init__(
        self,
        should_stop_fn: Callable[[], bool],
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> None:
        self._should_stop_fn = should_stop_fn
        self._timer = tf.compat.v1.train.SecondOrStepTimer(
            every_secs=run_every_secs, every_steps=run_every_steps
        )
        self._global_step: tf.Tensor | None = None
        self._stop_var: tf.Variable | None = None
        self._set_stop: tf.Tensor | None = None

    def begin(self) -> None:
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._global_step is None:
            raise RuntimeError("early stopping needs a global step in the graph.")
        self._stop_var = _stop_variable()
        self._set_stop = tf.compat.v1.assign(self._stop_var, True)

    def before_run(self, run_context: _RunContext) -> _RunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context: _RunContext, run_values: _RunValues) -> None:
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if self._should_stop_fn():
                _log.info("Early stopping requested at global step %d.", step)
                run_context.session.run(self._set_stop)
                run_context.request_stop()


class _CheckForStoppingHook(_SessionRunHook):
    """A worker's early-stopping hook: stops once the chief has set the stop variable."""

    def __init__(self) -> None:
        self._stop: tf.Variable | None = None

    def begin(self) -> None:
        self._stop = _stop_variable()

    def before_run(self, run_context: _RunContext) -> _RunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._stop)

    def after_run(self, run_context: _RunContext, run_values: _RunValues) -> None:
        if run_values.results:
            _log.info("The chief requested early stopping; this worker stops.")
            run_context.request_stop()


def _check_estimator(estimator: object) -> None:
    if not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be a tf_bridge Estimator, got {type(estimator).__name__}.")


def _build(
    estimator: Estimator,
    should_stop_fn: Callable[[], bool],
    every_secs: float | None,
    every_steps: int | None,
) -> _SessionRunHook:
    """On the chief (and without a cluster) a hook that calls ``should_stop_fn`` every
    ``every_secs`` / ``every_steps``; when it returns True it sets the global variable
    ``signal_early_stopping/STOP`` and stops. On the other tasks of a cluster a hook that
    stops as soon as that variable is set. As in tf.estimator, the variable is part of the
    graph and of its checkpoints."""
    if estimator.config.is_chief:
        return _StopOnPredicateHook(should_stop_fn, every_secs, every_steps)
    return _CheckForStoppingHook()


def read_eval_metrics(eval_dir: str) -> collections.OrderedDict[int, dict[str, float]]:
    """The scalar metrics in ``eval_dir``'s event files, by global step, steps ascending
    (``tf.estimator.experimental.read_eval_metrics``). A corrupt tail of a file is skipped
    with a warning."""
    by_step: dict[int, dict[str, float]] = collections.defaultdict(dict)
    if tf.io.gfile.exists(eval_dir):
        for path in tf.io.gfile.glob(os.path.join(eval_dir, "events.out.tfevents.*")):
            try:
                for event in tf.compat.v1.train.summary_iterator(path):
                    values = {
                        v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")
                    }
                    if values:
                        by_step[event.step].update(values)
            except tf.errors.DataLossError as err:
                _log.warning("Skipping the rest of %s (corrupt): %s", path, err)
    return collections.OrderedDict(sorted(by_step.items()))


# build is called only with what _check_estimator accepted (a tf_bridge Estimator), which
# the shared factories type as the EvalDirOwner they read.
_factories = EarlyStoppingFactories(_check_estimator, _build, read_eval_metrics)  # type: ignore[arg-type]
make_early_stopping_hook = _factories.make_early_stopping_hook  # the hook: see ``_build``
stop_if_higher_hook = _factories.stop_if_higher_hook
stop_if_lower_hook = _factories.stop_if_lower_hook
stop_if_no_increase_hook = _factories.stop_if_no_increase_hook
stop_if_no_decrease_hook = _factories.stop_if_no_decrease_hook


class _StopAtCheckpointStepHook(_SessionRunHook):
    """Stops a non-chief trainer once the checkpoint in ``model_dir`` reached
    ``last_step`` (checked when this worker's own global step is at or past it), so
    workers do not stop before the chief has saved the last step."""

    def __init__(self, model_dir: str, last_step: int, wait_after_file_check_secs: float = 30) -> None:
        if last_step is None:
            raise ValueError("last_step is required.")
        if model_dir is None:
            raise ValueError("model_dir is required.")
        self._model_dir, self._last_step = model_dir, last_step
        self._wait = wait_after_file_check_secs
        self._global_step: tf.Tensor | None = None

    def begin(self) -> None:
        self._global_step = training_util._get_or_create_global_step_read()
        if self._global_step is None:
            raise RuntimeError("stopping at a checkpoint step needs a global step in the graph.")

    def before_run(self, run_context: _RunContext) -> _RunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context: _RunContext, run_values: _RunValues) -> None:
        if int(run_values.results) + 1 < self._last_step:
            return
        if load_global_step(self._model_dir) >= self._last_step:
            run_context.request_stop()
        else:  # many workers reading the checkpoint state at once: pace the reads
            time.sleep(self._wait)


def make_stop_at_checkpoint_step_hook(
    estimator: Estimator, last_step: int, wait_after_file_check_secs: float = 30
) -> _SessionRunHook:
    """A hook that ends training at ``last_step`` on every task of a cluster
    (``tf.estimator.experimental.make_stop_at_checkpoint_step_hook``): on the chief a
    ``StopAtStepHook``; on other tasks one that stops once ``estimator.model_dir``'s
    latest checkpoint is at ``last_step``, reading it at most every
    ``wait_after_file_check_secs`` seconds.

    Raises:
      ValueError: last_step or the model_dir is None.
    """
    if estimator.config.is_chief:
        return tf.compat.v1.train.StopAtStepHook(last_step=last_step)
    return _StopAtCheckpointStepHook(estimator.model_dir, last_step, wait_after_file_check_secs)


__all__ = [
    "ExamplesPerSecondHook",
    "HostCallFetchHook",
    "InMemoryEvaluatorHook",
    "StopAfterNEvalsHook",
    "make_early_stopping_hook",
    "make_stop_at_checkpoint_step_hook",
    "read_eval_metrics",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]
