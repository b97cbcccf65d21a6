"""The SessionRunHooks tf_bridge's runner adds by itself (tf.estimator's internal hooks).

- ``HostCallFetchHook``: fetches a host_call's outputs at every step (TPUEstimator's CPU
  path and the NPU path); jaxspec's ``HostCallHook`` is the marker a spec carries, this
  one runs the ops in a TensorFlow session;
- ``StopAfterNEvalsHook``: stops evaluation after N batches (``Estimator.evaluate(steps)``);
- ``ExamplesPerSecondHook``: TPUEstimator's ``global_step/sec`` + ``examples/sec``.

They need only TensorFlow, so the specs and the runner import them without importing the
user-facing hooks (``tf_bridge.runtime.hooks``), which need the runner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TypeAlias

import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2

_log = logging.getLogger("tf_bridge")
_SessionRunHook: TypeAlias = tf.compat.v1.train.SessionRunHook
_RunContext: TypeAlias = tf.compat.v1.train.SessionRunContext
_RunValues: TypeAlias = tf.compat.v1.train.SessionRunValues
_RunArgs: TypeAlias = tf.compat.v1.train.SessionRunArgs

# What ``Session.run`` fetches: ops, tensors or their names, nested in lists, tuples and
# dicts; None fetches nothing.
Fetches: TypeAlias = (
    "tf.Operation | tf.Tensor | tf.SparseTensor | str | Sequence[Fetches] | Mapping[str, Fetches] | None"
)


class HostCallFetchHook(_SessionRunHook):
    """Fetches a host_call's outputs at every step, as TPUEstimator's CPU path does.

    ``fetches`` is what ``host_fn`` returned when it was called in the graph (ops,
    tensors, or a structure of them, e.g. ``tf.compat.v1.summary.all_v2_summary_ops()``).
    ``begin`` collects the initialisers of the graph's ``tf.summary`` writers, run after
    the session is created; ``end`` flushes those writers.

    Args:
      fetches: anything ``Session.run`` accepts; None fetches nothing.
    """

    def __init__(self, fetches: Fetches) -> None:
        self._fetches = fetches
        self._init_ops: list[tf.Operation] = []
        self._flush_ops: list[tf.Operation] = []

    @property
    def fetches(self) -> Fetches:
        """What is run at every step."""
        return self._fetches

    def begin(self) -> None:
        self._init_ops = list(summary_ops_v2.summary_writer_initializer_op())
        self._flush_ops = [summary_ops_v2.legacy_raw_flush(writer=op.inputs[0]) for op in self._init_ops]

    def after_create_session(self, session: tf.compat.v1.Session, coord: tf.train.Coordinator) -> None:
        if self._init_ops:
            session.run(self._init_ops)

    def before_run(self, run_context: _RunContext) -> _RunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def end(self, session: tf.compat.v1.Session) -> None:
        if self._flush_ops:
            session.run(self._flush_ops)


class StopAfterNEvalsHook(_SessionRunHook):
    """Requests a stop once ``num_evals`` evaluation batches are done (the hook behind
    ``Estimator.evaluate(steps=N)``).

    The evaluation loop gives it the tensor that counts finished batches
    (``set_evals_completed_tensor``); it is fetched with each batch.

    Args:
      num_evals: number of batches, a positive int.
      log_progress: log ``Evaluation [k/N]`` (every batch below 20, else every tenth).
    """

    def __init__(self, num_evals: int, log_progress: bool = True) -> None:
        self._num_evals = num_evals
        self._completed: tf.Tensor | None = None
        self._log_progress = log_progress
        self._log_every = 1 if num_evals < 20 else math.floor(num_evals / 10.0)

    def set_evals_completed_tensor(self, tensor: tf.Tensor) -> None:
        """The int tensor holding the number of batches done after this run."""
        self._completed = tensor

    def before_run(self, run_context: _RunContext) -> _RunArgs:
        return tf.compat.v1.train.SessionRunArgs({"evals_completed": self._completed})

    def after_run(self, run_context: _RunContext, run_values: _RunValues) -> None:
        done = int(run_values.results["evals_completed"])
        if self._log_progress and (done % self._log_every == 0 or done == self._num_evals):
            _log.info("Evaluation [%d/%d]", done, self._num_evals)
        if done >= self._num_evals:
            run_context.request_stop()


class ExamplesPerSecondHook(tf.compat.v1.train.StepCounterHook):
    """``global_step/sec`` and ``examples/sec`` (TPUEstimator's hook): a StepCounterHook
    that also multiplies the step rate by the global batch size.

    Args:
      batch_size: global batch size (examples per step).
      every_n_steps, every_n_secs, output_dir, summary_writer: as StepCounterHook.
    """

    def __init__(
        self,
        batch_size: int,
        every_n_steps: int | None = 100,
        every_n_secs: float | None = None,
        output_dir: str | None = None,
        summary_writer: tf.compat.v1.summary.FileWriter | None = None,
    ) -> None:
        self._batch_size = batch_size
        super().__init__(
            every_n_steps=every_n_steps,
            every_n_secs=every_n_secs,
            output_dir=output_dir,
            summary_writer=summary_writer,
        )

    def _log_and_record(self, elapsed_steps: int, elapsed_time: float, global_step: int) -> None:
        steps_per_sec = elapsed_steps / elapsed_time
        examples_per_sec = self._batch_size * steps_per_sec
        if self._summary_writer is not None:
            summary = tf.compat.v1.Summary(
                value=[
                    tf.compat.v1.Summary.Value(tag="global_step/sec", simple_value=steps_per_sec),
                    tf.compat.v1.Summary.Value(tag="examples/sec", simple_value=examples_per_sec),
                ]
            )
            self._summary_writer.add_summary(summary, global_step)
        _log.info("global_step/sec: %g, examples/sec: %g", steps_per_sec, examples_per_sec)


__all__ = ["ExamplesPerSecondHook", "HostCallFetchHook", "StopAfterNEvalsHook"]
