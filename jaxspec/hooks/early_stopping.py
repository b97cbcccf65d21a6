"""Early stopping on evaluation results (``tf.estimator.experimental``'s hooks).

The hooks read the scalars that ``evaluate`` writes to ``est.eval_dir()`` (TensorBoard
event files) every ``run_every_secs`` seconds or ``run_every_steps`` steps and request
a stop when their condition holds, as tf.estimator's do. With several processes,
process 0 reads and decides, and the decision reaches every process after the same
loop, so all stop at the same global step (tf.estimator's non-chief workers poll a stop
variable instead).
"""

from __future__ import annotations

import collections
import glob
import logging
import operator
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.spec.hooks import NEVER, SessionRunArgs, SessionRunHook

_log = logging.getLogger("jaxspec")

__all__ = [
    "make_early_stopping_hook",
    "read_eval_metrics",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]


def _records(path: str) -> Any:
    """The records of one TFRecord file; a truncated or corrupt tail ends the file."""
    from tensorboardX.record_writer import masked_crc32c

    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                _log.warning("Skipping the rest of %s: a corrupt record header.", path)
                return
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return  # being written
            yield data


def read_eval_metrics(eval_dir: str) -> collections.OrderedDict[int, dict[str, float]]:
    """The scalar summaries in ``eval_dir``'s event files as ``{global_step: {tag:
    value}}``, steps ascending (``tf.estimator.experimental.read_eval_metrics``).

    Args:
      eval_dir: a directory written by ``evaluate`` (``est.eval_dir(name)``); missing
        means no results yet.
    """
    from tensorboardX.proto.event_pb2 import Event

    by_step: dict[int, dict[str, float]] = collections.defaultdict(dict)
    for path in sorted(glob.glob(os.path.join(eval_dir, "events.out.tfevents.*"))):
        for data in _records(path):
            event = Event.FromString(data)
            values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
            if values:
                by_step[event.step].update(values)
    return collections.OrderedDict(sorted(by_step.items()))


class _StopOnPredicateHook(SessionRunHook):
    """Calls ``should_stop_fn`` on process 0 when the timer says so; stops every process."""

    def __init__(self, should_stop_fn: Callable[[], bool], every_secs: Any, every_steps: Any) -> None:
        self._should_stop_fn = should_stop_fn
        self._timer = SecondOrStepTimer(every_secs, every_steps)

    def next_required_step(self, global_step: int) -> int:
        """The next step to decide at; NEVER with run_every_secs (decided at the end of
        a loop once the time has come)."""
        step = self._timer.next_trigger_step(global_step)
        return NEVER if step is None else step

    def reads_state_after(self, step: int) -> bool:
        """False: it reads the eval event files, never ``session.state``."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """Whether it decides at ``step``: a steps timer due there, or any step with
        run_every_secs (the time may come before the loop ends)."""
        if self._timer.next_trigger_step(step) is None:
            return True
        return self._timer.should_trigger_for_step(step)

    def before_run(self, run_context: Any) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Decide (process 0) when due, share the decision, stop if it says so."""
        step = int(run_values.results)
        stop = False
        # every process keeps the timer, so all of them ask for the same loop ends
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            stop = jax.process_index() == 0 and bool(self._should_stop_fn())
        if jax.process_count() > 1:  # every process is here after the same loop
            from jax.experimental import multihost_utils

            stop = bool(multihost_utils.broadcast_one_to_all(np.asarray(stop, np.int32)))
        if stop:
            _log.info("Requesting early stopping at global step %d.", step)
            run_context.request_stop()


def make_early_stopping_hook(
    estimator: Any,
    should_stop_fn: Callable[[], bool],
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> SessionRunHook:
    """A hook that stops training once ``should_stop_fn()`` returns True
    (``tf.estimator.experimental.make_early_stopping_hook``).

    Args:
      estimator: the jaxspec Estimator (TPUEstimator, NPUEstimator) being trained.
      should_stop_fn: ``() -> bool``, called on process 0 only.
      run_every_secs: seconds between calls (float, default 60); the first loop of a
        ``train`` call always calls it.
      run_every_steps: or global steps between calls (int); set only one of the two.
        Checks happen between loops, so with ``iterations_per_loop`` > 1 a check is due
        at the first loop boundary past the interval.

    Raises:
      TypeError: ``estimator`` is not a jaxspec Estimator, or ``should_stop_fn`` is
        not callable.
      ValueError: both run_every_secs and run_every_steps are set.
    """
    # The hooks layer sits below the facades and does not import them: an Estimator
    # exists only once its module is loaded, so the class is looked up there.
    facade = sys.modules.get("jaxspec.estimator")
    if facade is None or not isinstance(estimator, facade.Estimator):
        raise TypeError(f"estimator must be a jaxspec Estimator, got {type(estimator).__name__}.")
    if not callable(should_stop_fn):
        raise TypeError(f"should_stop_fn must be callable, got {type(should_stop_fn).__name__}.")
    if run_every_secs is not None and run_every_steps is not None:
        raise ValueError("make_early_stopping_hook: set run_every_secs or run_every_steps, not both.")
    return _StopOnPredicateHook(should_stop_fn, run_every_secs, run_every_steps)


def _metric(metrics: dict[str, float], name: str, eval_dir: str) -> float:
    if name not in metrics:
        raise KeyError(
            f"metric_name {name!r} is not among the eval results in {eval_dir}: {sorted(metrics)}."
        )
    return metrics[name]


def threshold_crossed(
    read: Callable[[str], Any],
    directory: str,
    metric_name: str,
    threshold: float,
    higher: bool,
    min_steps: int,
) -> Callable[[], bool]:
    """``() -> bool``: has an evaluation at global step >= ``min_steps`` reported
    ``metric_name`` above (``higher``) or below ``threshold``? ``read(directory)`` gives
    ``{global_step: {tag: value}}`` (``read_eval_metrics``). tf_bridge's hooks share it.

    Raises (when called):
      KeyError: an evaluation lacks ``metric_name`` (the known names are listed).
    """
    past = operator.gt if higher else operator.lt

    def crossed() -> bool:
        for step, metrics in read(directory).items():
            value = _metric(metrics, metric_name, directory)
            if step >= min_steps and past(value, threshold):
                _log.info(
                    "Early stopping: %r = %s at global step %d is %s the threshold %s.",
                    metric_name,
                    value,
                    step,
                    "above" if higher else "below",
                    threshold,
                )
                return True
        return False

    return crossed


def no_improvement(
    read: Callable[[str], Any],
    directory: str,
    metric_name: str,
    max_steps_without_improvement: int,
    higher: bool,
    min_steps: int,
) -> Callable[[], bool]:
    """``() -> bool``: has ``metric_name`` gone ``max_steps_without_improvement`` global
    steps of evaluations (from ``min_steps`` on) without a new best (higher is better
    with ``higher``)? ``read`` as in ``threshold_crossed``; tf_bridge's hooks share it.

    Raises (when called):
      KeyError: an evaluation lacks ``metric_name``.
    """
    better = operator.gt if higher else operator.lt

    def stalled() -> bool:
        best, best_step = None, None
        for step, metrics in read(directory).items():
            if step < min_steps:
                continue
            value = _metric(metrics, metric_name, directory)
            if best is None or better(value, best):
                best, best_step = value, step
            if step - best_step >= max_steps_without_improvement:
                _log.info(
                    "Early stopping: %r has not %s for %d steps (best %s at global step %d; limit %d).",
                    metric_name,
                    "increased" if higher else "decreased",
                    step - best_step,
                    best,
                    best_step,
                    max_steps_without_improvement,
                )
                return True
        return False

    return stalled


def _threshold_hook(
    estimator: Any,
    metric_name: str,
    threshold: float,
    higher: bool,
    eval_dir: str | None,
    min_steps: int,
    run_every_secs: float | None,
    run_every_steps: int | None,
) -> SessionRunHook:
    directory = eval_dir or estimator.eval_dir()
    crossed = threshold_crossed(read_eval_metrics, directory, metric_name, threshold, higher, min_steps)
    return make_early_stopping_hook(estimator, crossed, run_every_secs, run_every_steps)


def _no_improvement_hook(
    estimator: Any,
    metric_name: str,
    max_steps_without_improvement: int,
    higher: bool,
    eval_dir: str | None,
    min_steps: int,
    run_every_secs: float | None,
    run_every_steps: int | None,
) -> SessionRunHook:
    directory = eval_dir or estimator.eval_dir()
    stalled = no_improvement(
        read_eval_metrics, directory, metric_name, max_steps_without_improvement, higher, min_steps
    )
    return make_early_stopping_hook(estimator, stalled, run_every_secs, run_every_steps)


def stop_if_higher_hook(
    estimator: Any,
    metric_name: str,
    threshold: float,
    eval_dir: str | None = None,
    min_steps: int = 0,
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> SessionRunHook:
    """Stop once an evaluation at global step >= ``min_steps`` has ``metric_name`` >
    ``threshold`` (``tf.estimator.experimental.stop_if_higher_hook``).

    Args:
      estimator: the Estimator being trained; its ``eval_dir()`` is read when
        ``eval_dir`` is None.
      metric_name: a scalar eval metric (``'loss'`` or a key of eval_metric_ops).
      threshold: the value to exceed (float).
      eval_dir: the directory of evaluation event files (``est.eval_dir(name)``).
      min_steps: evaluations before this global step are ignored.
      run_every_secs, run_every_steps: as ``make_early_stopping_hook``.

    Raises:
      KeyError: (when checked) an evaluation lacks ``metric_name`` (as TF).
      ValueError: as
        ``make_early_stopping_hook``.
    """
    return _threshold_hook(
        estimator, metric_name, threshold, True, eval_dir, min_steps, run_every_secs, run_every_steps
    )


def stop_if_lower_hook(
    estimator: Any,
    metric_name: str,
    threshold: float,
    eval_dir: str | None = None,
    min_steps: int = 0,
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> SessionRunHook:
    """Stop once an evaluation at global step >= ``min_steps`` has ``metric_name`` <
    ``threshold`` (``tf.estimator.experimental.stop_if_lower_hook``); arguments and
    errors as ``stop_if_higher_hook``."""
    return _threshold_hook(
        estimator, metric_name, threshold, False, eval_dir, min_steps, run_every_secs, run_every_steps
    )


def stop_if_no_increase_hook(
    estimator: Any,
    metric_name: str,
    max_steps_without_increase: int,
    eval_dir: str | None = None,
    min_steps: int = 0,
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> SessionRunHook:
    """Stop once ``metric_name`` has not increased for ``max_steps_without_increase``
    global steps: an evaluation that many steps after the best one (evaluations before
    ``min_steps`` ignored), as ``tf.estimator.experimental.stop_if_no_increase_hook``;
    other arguments and errors as ``stop_if_higher_hook``."""
    return _no_improvement_hook(
        estimator,
        metric_name,
        max_steps_without_increase,
        True,
        eval_dir,
        min_steps,
        run_every_secs,
        run_every_steps,
    )


def stop_if_no_decrease_hook(
    estimator: Any,
    metric_name: str,
    max_steps_without_decrease: int,
    eval_dir: str | None = None,
    min_steps: int = 0,
    run_every_secs: float | None = 60,
    run_every_steps: int | None = None,
) -> SessionRunHook:
    """Stop once ``metric_name`` has not decreased for ``max_steps_without_decrease``
    global steps (``tf.estimator.experimental.stop_if_no_decrease_hook``); see
    ``stop_if_no_increase_hook``."""
    return _no_improvement_hook(
        estimator,
        metric_name,
        max_steps_without_decrease,
        False,
        eval_dir,
        min_steps,
        run_every_secs,
        run_every_steps,
    )
