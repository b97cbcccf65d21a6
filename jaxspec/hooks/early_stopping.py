"""Early stopping on evaluation results (``tf.estimator.experimental``'s hooks).

The hooks read the scalars that ``evaluate`` writes to ``est.eval_dir()`` (TensorBoard
event files) every ``run_every_secs`` seconds or ``run_every_steps`` steps and request
a stop when their condition holds, as tf.estimator's do. The conditions and the four
``stop_if_*`` factories are ``jaxspec.rules.early_stopping``'s, shared with tf_bridge. With several processes,
process 0 reads and decides, and the decision reaches every process after the same
loop, so all stop at the same global step (tf.estimator's non-chief workers poll a stop
variable instead).
"""

from __future__ import annotations

import collections
import logging
import struct
import sys
from collections.abc import Callable, Iterator

import jax
import numpy as np

from jaxspec.hooks.timer import SecondOrStepTimer
from jaxspec.rules.early_stopping import EarlyStoppingFactories, EvalDirOwner
from jaxspec.spec.hooks import NEVER, SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from jaxspec.store import paths

_log = logging.getLogger("jaxspec")

__all__ = [
    "make_early_stopping_hook",
    "read_eval_metrics",
    "stop_if_higher_hook",
    "stop_if_lower_hook",
    "stop_if_no_decrease_hook",
    "stop_if_no_increase_hook",
]


def _records(path: str) -> Iterator[bytes]:
    """The records of one TFRecord file; a truncated or corrupt tail ends the file."""
    from tensorboardX.record_writer import masked_crc32c

    with paths.open_file(path, "rb") as f:
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
    for path in sorted(paths.glob(paths.join(eval_dir, "events.out.tfevents.*"))):
        for data in _records(path):
            event = Event.FromString(data)
            values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
            if values:
                by_step[event.step].update(values)
    return collections.OrderedDict(sorted(by_step.items()))


class _StopOnPredicateHook(SessionRunHook):
    """Calls ``should_stop_fn`` on process 0 when the timer says so; stops every process."""

    def __init__(
        self, should_stop_fn: Callable[[], bool], every_secs: float | None, every_steps: int | None
    ) -> None:
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

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        """Fetch the global step."""
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
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


def _check_estimator(estimator: object) -> None:
    # The hooks layer sits below the facades and does not import them: an Estimator
    # exists only once its module is loaded, so the class is looked up there.
    facade = sys.modules.get("jaxspec.estimators.estimator")
    if facade is None or not isinstance(estimator, facade.Estimator):
        raise TypeError(f"estimator must be a jaxspec Estimator, got {type(estimator).__name__}.")


def _build(
    estimator: EvalDirOwner,
    should_stop_fn: Callable[[], bool],
    every_secs: float | None,
    every_steps: int | None,
) -> SessionRunHook:
    return _StopOnPredicateHook(should_stop_fn, every_secs, every_steps)


# ``make_early_stopping_hook(estimator, should_stop_fn, run_every_secs=60,
# run_every_steps=None)``: should_stop_fn is called on process 0 only; the first loop of
# a ``train`` call always calls it; checks happen between loops, so with
# ``iterations_per_loop`` > 1 a check is due at the first loop boundary past the interval.
_factories = EarlyStoppingFactories(_check_estimator, _build, read_eval_metrics)
make_early_stopping_hook = _factories.make_early_stopping_hook
stop_if_higher_hook = _factories.stop_if_higher_hook
stop_if_lower_hook = _factories.stop_if_lower_hook
stop_if_no_increase_hook = _factories.stop_if_no_increase_hook
stop_if_no_decrease_hook = _factories.stop_if_no_decrease_hook
