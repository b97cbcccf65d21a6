"""train_and_evaluate with TrainSpec and EvalSpec (``tf.estimator.train_and_evaluate``)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from jaxspec.exporter import Exporter
from jaxspec.hooks.checkpoint import CheckpointSaverListener
from jaxspec.spec.hooks import SessionRunHook

_log = logging.getLogger("jaxspec")


def _hooks(hooks: Any, owner: str) -> tuple[SessionRunHook, ...]:
    hooks = tuple(hooks or ())
    for h in hooks:
        if not isinstance(h, SessionRunHook):
            raise TypeError(f"{owner}: hooks must be SessionRunHooks, got {type(h).__name__}.")
    return hooks


class TrainSpec:
    """The training half of train_and_evaluate (``tf.estimator.TrainSpec``).

    Args:
      input_fn: the training input_fn.
      max_steps: absolute global step to stop at (None: until the input ends).
      hooks: SessionRunHooks for training.
      saving_listeners: CheckpointSaverListeners.

    Raises:
      TypeError: input_fn not callable or a hook of another type.
      ValueError: max_steps <= 0.
    """

    def __init__(
        self,
        input_fn: Callable[..., Any],
        max_steps: int | None = None,
        hooks: Any = None,
        saving_listeners: Any = None,
    ) -> None:
        if not callable(input_fn):
            raise TypeError("TrainSpec: input_fn must be callable.")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"TrainSpec: max_steps must be > 0, got {max_steps}.")
        self.input_fn, self.max_steps = input_fn, max_steps
        self.hooks = _hooks(hooks, "TrainSpec")
        self.saving_listeners = tuple(saving_listeners or ())


class EvalSpec:
    """The evaluation half of train_and_evaluate (``tf.estimator.EvalSpec``).

    Args:
      input_fn: the eval input_fn.
      steps: batches per evaluation (100); None runs to the end of the input.
      name: evaluation name; results go to ``model_dir/eval_<name>``.
      hooks: SessionRunHooks for evaluation.
      exporters: an Exporter or a list of Exporters with distinct names.
      start_delay_secs: accepted (a distributed evaluator's delay; local runs start at
        the first checkpoint).
      throttle_secs: evaluate after a checkpoint only if this many seconds passed since
        the last evaluation (600).
      every_n_steps: beyond TF: evaluate every N training steps instead of by time.

    Raises:
      TypeError / ValueError: as TF for bad values; duplicate exporter names (ValueError).
    """

    def __init__(
        self,
        input_fn: Callable[..., Any],
        steps: int | None = 100,
        name: str | None = None,
        hooks: Any = None,
        exporters: Any = None,
        start_delay_secs: float = 120,
        throttle_secs: float = 600,
        every_n_steps: int | None = None,
    ) -> None:
        if not callable(input_fn):
            raise TypeError("EvalSpec: input_fn must be callable.")
        if steps is not None and steps <= 0:
            raise ValueError(f"EvalSpec: steps must be > 0 or None, got {steps}.")
        if start_delay_secs < 0 or throttle_secs < 0:
            raise ValueError("EvalSpec: start_delay_secs and throttle_secs must be >= 0.")
        if every_n_steps is not None and every_n_steps <= 0:
            raise ValueError(f"EvalSpec: every_n_steps must be > 0, got {every_n_steps}.")
        exporters = [exporters] if isinstance(exporters, Exporter) else list(exporters or ())
        for e in exporters:
            if not isinstance(e, Exporter):
                raise TypeError(f"EvalSpec: exporters must be Exporters, got {type(e).__name__}.")
        if len({e.name for e in exporters}) != len(exporters):
            raise ValueError("EvalSpec: exporter names must be distinct.")
        self.input_fn, self.steps, self.name = input_fn, steps, name
        self.hooks = _hooks(hooks, "EvalSpec")
        self.exporters = tuple(exporters)
        self.start_delay_secs, self.throttle_secs, self.every_n_steps = (
            start_delay_secs,
            throttle_secs,
            every_n_steps,
        )


class _Evaluator:
    """Evaluates one EvalSpec on a checkpoint and runs its exporters."""

    def __init__(self, estimator: Any, spec: EvalSpec, max_steps: int | None) -> None:
        self.est, self.spec, self.max_steps = estimator, spec, max_steps
        self.last_time = time.time()
        self.last_step: int | None = None
        self.result: tuple[dict[str, Any], list[Any]] | None = None
        self.exported_final = False

    def due_by_time(self) -> bool:
        return time.time() - self.last_time >= self.spec.throttle_secs

    def run(self, final: bool) -> None:
        store = self.est._checkpoint_store()
        store.wait()
        step = store.latest_step()
        if step is None:
            return
        final = final or (self.max_steps is not None and step >= self.max_steps)
        path = store.path(step)
        if step == self.last_step:  # evaluated already (TF does not evaluate it twice)
            if final and not self.exported_final:  # the input ended before max_steps
                self._export(path, self.result[0], step, final=True)
            return
        metrics = self.est.evaluate(
            self.spec.input_fn,
            steps=self.spec.steps,
            hooks=self.spec.hooks,
            checkpoint_path=path,
            name=self.spec.name,
        )
        self._export(path, metrics, step, final)

    def _export(self, path: str, metrics: dict[str, Any], step: int, final: bool) -> None:
        exports = []
        for exporter in self.spec.exporters:
            export_path = os.path.join(self.est.model_dir, "export", exporter.name)
            exports.append(exporter.export(self.est, export_path, path, metrics, final))
        self.last_time, self.last_step, self.result = time.time(), step, (metrics, exports)
        self.exported_final = final


class _EvaluateAfterSave(CheckpointSaverListener):
    def __init__(self, evaluators: list[_Evaluator]) -> None:
        self.evaluators = evaluators

    def after_save(self, session: Any, global_step_value: int) -> None:
        for ev in self.evaluators:
            if ev.due_by_time():
                ev.run(final=False)


def train_and_evaluate(estimator: Any, train_spec: TrainSpec, eval_spec: Any) -> Any:
    """Train, evaluating (and exporting) along the way, as ``tf.estimator.train_and_evaluate``
    does in a single process.

    Time-throttled EvalSpecs evaluate after a checkpoint save once ``throttle_secs``
    passed. EvalSpecs with ``every_n_steps`` (beyond TF) make training run in chunks of
    that many steps with an evaluation after each (input_fn is called again per chunk,
    as after any restart). Every spec evaluates once more at the end, and exporters
    see ``is_the_final_export=True`` for the last checkpoint (the one at max_steps, or
    the last one when the input ended); no checkpoint is evaluated twice. Several EvalSpecs may be given (beyond TF),
    each writing to its own ``eval_<name>`` directory.

    Returns:
      ``(eval_result, export_results)`` of the final evaluation; with a list of
      EvalSpecs, a list of those pairs.

    Raises:
      TypeError: a spec of the wrong type.
      ValueError: several EvalSpecs share a name.
    """
    specs = eval_spec if isinstance(eval_spec, (list, tuple)) else [eval_spec]
    if not isinstance(train_spec, TrainSpec) or not all(isinstance(s, EvalSpec) for s in specs):
        raise TypeError("train_and_evaluate takes a TrainSpec and an EvalSpec (or a list of them).")
    if len({s.name for s in specs}) != len(specs):
        raise ValueError("train_and_evaluate: EvalSpecs need distinct names.")
    evaluators = [_Evaluator(estimator, s, train_spec.max_steps) for s in specs]
    timed = [ev for ev in evaluators if ev.spec.every_n_steps is None]
    by_steps = [ev for ev in evaluators if ev.spec.every_n_steps is not None]
    listeners = list(train_spec.saving_listeners) + ([_EvaluateAfterSave(timed)] if timed else [])
    if not by_steps:
        estimator.train(
            train_spec.input_fn,
            hooks=train_spec.hooks,
            max_steps=train_spec.max_steps,
            saving_listeners=listeners,
        )
    else:
        _train_in_chunks(estimator, train_spec, by_steps, listeners)
    for ev in evaluators:
        ev.run(final=True)
    results = [ev.result for ev in evaluators]
    return results if isinstance(eval_spec, (list, tuple)) else results[0]


def _train_in_chunks(
    estimator: Any, train_spec: TrainSpec, evaluators: list[_Evaluator], listeners: list[Any]
) -> None:
    chunk = min(ev.spec.every_n_steps for ev in evaluators)
    store = estimator._checkpoint_store()
    while True:
        start = store.latest_step() or 0
        target = (start // chunk + 1) * chunk
        if train_spec.max_steps is not None:
            if start >= train_spec.max_steps:
                return
            target = min(target, train_spec.max_steps)
        estimator.train(
            train_spec.input_fn, hooks=train_spec.hooks, max_steps=target, saving_listeners=listeners
        )
        reached = store.latest_step() or 0
        for ev in evaluators:
            if reached // ev.spec.every_n_steps > start // ev.spec.every_n_steps:
                ev.run(final=False)
        if reached < target:  # the input ended
            return
