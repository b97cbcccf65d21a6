"""train_and_evaluate with TrainSpec and EvalSpec (``tf.estimator.train_and_evaluate``).

The driver here is shared: jaxspec's ``train_and_evaluate`` runs it on a jaxspec
Estimator, ``tf_bridge.train_and_evaluate`` on a TensorFlow one. What differs between the
two is passed in as a ``Family`` (the hook, listener and spec types to check, how to read
the newest checkpoint, whether the saver also saves when the session is created).
In a TF_CONFIG cluster each task does its part, as tf.estimator's distributed
train_and_evaluate did: the chief and the workers train, the evaluator task evaluates
(``run_cluster_task``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias, TypeVar, cast

from jaxspec.config.cluster import CHIEF, EVALUATOR, WORKER, run_config_task
from jaxspec.estimators.estimator import Estimator
from jaxspec.estimators.exporter import Exporter, ExportingEstimator
from jaxspec.hooks.checkpoint import CheckpointSaverListener
from jaxspec.spec.fn_types import InputFn
from jaxspec.spec.hooks import SessionRunHook

_log = logging.getLogger("jaxspec")

#: Seconds between two "no new checkpoint" log lines of an evaluator.
NOTICE_INTERVAL_SECS = 600
#: Seconds between a separate evaluator's looks at model_dir with ``throttle_secs=0``.
POLL_SECS = 1.0

T = TypeVar("T")
# One evaluation's outcome: its metrics and, per exporter, the directory it wrote (or
# None); ``(None, None)`` before the first evaluation.
EvalOutcome: TypeAlias = tuple[dict[str, Any] | None, list[bytes | None] | None]


def _typed(items: Iterable[object] | None, expected: type[T], owner: str, what: str) -> tuple[T, ...]:
    checked = tuple(items or ())
    for item in checked:
        if not isinstance(item, expected):
            raise TypeError(
                f"{owner}: {what} must be {expected.__name__} instances, got {type(item).__name__}."
            )
    return checked  # type: ignore[return-value]  # each item is an `expected`


def _exporters(exporters: Exporter | Iterable[Exporter] | None) -> tuple[Exporter, ...]:
    """One Exporter, an iterable of them, or None, as a tuple (tf.estimator's rules).

    Raises:
      TypeError: something that is not an Exporter.
      ValueError: an empty, non-string or repeated exporter name.
    """
    if not exporters:
        return ()
    if isinstance(exporters, Exporter):
        exporters = [exporters]
    try:
        exporters = list(exporters)
    except TypeError:
        raise TypeError(f"EvalSpec: exporters must be an Exporter or Exporters, got {exporters!r}.") from None
    names: list[str] = []
    for exporter in exporters:
        if not isinstance(exporter, Exporter):
            raise TypeError(f"EvalSpec: exporters must be Exporters, got {type(exporter).__name__}.")
        if not exporter.name or not isinstance(exporter.name, str):
            raise ValueError(f"EvalSpec: each exporter needs a non-empty string name, got {exporter.name!r}.")
        if exporter.name in names:
            raise ValueError(f"EvalSpec: exporter names must be distinct; {exporter.name!r} repeats.")
        names.append(exporter.name)
    return tuple(exporters)


class TrainSpec:
    """The training half of train_and_evaluate (``tf.estimator.TrainSpec``).

    Args:
      input_fn: the training input_fn.
      max_steps: absolute global step to stop at (None: until the input ends).
      hooks: SessionRunHooks for training (stored as a tuple).
      saving_listeners: CheckpointSaverListeners (stored as a tuple).

    Raises:
      TypeError: input_fn not callable, a hook or listener of another type.
      ValueError: max_steps <= 0.
    """

    _hook_type: type[object] = SessionRunHook  # tf_bridge's TrainSpec: TF's classes
    _listener_type: type[object] = CheckpointSaverListener

    def __init__(
        self,
        input_fn: InputFn,
        max_steps: int | None = None,
        hooks: Iterable[SessionRunHook] | None = None,
        saving_listeners: Iterable[CheckpointSaverListener] | None = None,
    ) -> None:
        if not callable(input_fn):
            raise TypeError(f"TrainSpec: input_fn must be callable, got {input_fn!r}.")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"TrainSpec: max_steps must be > 0, got {max_steps}.")
        self.input_fn, self.max_steps = input_fn, max_steps
        self.hooks = _typed(hooks, self._hook_type, "TrainSpec", "hooks")
        self.saving_listeners = _typed(saving_listeners, self._listener_type, "TrainSpec", "saving_listeners")


class EvalSpec:
    """The evaluation half of train_and_evaluate (``tf.estimator.EvalSpec``).

    Args:
      input_fn: the eval input_fn.
      steps: batches per evaluation (100); None runs to the end of the input.
      name: evaluation name (a str); results go to ``model_dir/eval_<name>``.
      hooks: SessionRunHooks for evaluation.
      exporters: an Exporter or an iterable of Exporters with distinct names.
      start_delay_secs: seconds a separate evaluator task waits before its first
        evaluation (a local run starts at the first checkpoint).
      throttle_secs: evaluate after a checkpoint only if this many seconds passed since
        the last evaluation started (600).
      every_n_steps: beyond TF: evaluate every N training steps instead of by time.

    Raises:
      TypeError: input_fn not callable, a name that is not a str, a hook or exporter of
        another type.
      ValueError: steps <= 0, a negative delay, an empty or repeated exporter name.
    """

    _hook_type: type[object] = SessionRunHook

    def __init__(
        self,
        input_fn: InputFn,
        steps: int | None = 100,
        name: str | None = None,
        hooks: Iterable[SessionRunHook] | None = None,
        exporters: Exporter | Iterable[Exporter] | None = None,
        start_delay_secs: float = 120,
        throttle_secs: float = 600,
        every_n_steps: int | None = None,
    ) -> None:
        if not callable(input_fn):
            raise TypeError(f"EvalSpec: input_fn must be callable, got {input_fn!r}.")
        if steps is not None and steps <= 0:
            raise ValueError(f"EvalSpec: steps must be > 0 or None, got {steps}.")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"EvalSpec: name must be a str, got {name!r}.")
        checked_hooks = _typed(hooks, self._hook_type, "EvalSpec", "hooks")
        checked_exporters = _exporters(exporters)
        if start_delay_secs < 0:
            raise ValueError(f"EvalSpec: start_delay_secs must be >= 0, got {start_delay_secs}.")
        if throttle_secs < 0:
            raise ValueError(f"EvalSpec: throttle_secs must be >= 0, got {throttle_secs}.")
        if every_n_steps is not None and every_n_steps <= 0:
            raise ValueError(f"EvalSpec: every_n_steps must be > 0, got {every_n_steps}.")
        self.input_fn, self.steps, self.name = input_fn, steps, name
        self.hooks, self.exporters = checked_hooks, checked_exporters
        self.start_delay_secs, self.throttle_secs = start_delay_secs, throttle_secs
        self.every_n_steps = every_n_steps


@dataclasses.dataclass(frozen=True)
class Family:
    """What the shared driver needs to know about one kind of Estimator.

    Attributes:
      estimator_type, train_spec_type, eval_spec_type: accepted types (TypeError otherwise).
      listener_base: the CheckpointSaverListener class the Estimator's train accepts.
      latest_checkpoint: ``estimator -> path | None`` of the newest complete checkpoint.
      latest_step: ``estimator -> int``, that checkpoint's global step (0 without one).
      saves_at_creation: the saver also saves (and calls ``after_save``) when the session
        is created, as TensorFlow's CheckpointSaverHook does; that first save is not
        evaluated (tf.estimator skips it too).
    """

    estimator_type: type
    train_spec_type: type
    eval_spec_type: type
    listener_base: type
    latest_checkpoint: Callable[[Any], str | None]  # the family's Estimator
    latest_step: Callable[[Any], int]
    saves_at_creation: bool = False


class CheckpointEvaluator:
    """Evaluates one EvalSpec on the newest checkpoint and runs its exporters (the
    evaluator of tf.estimator's train_and_evaluate): a checkpoint already evaluated is
    skipped, so no checkpoint is evaluated or exported twice.

    ``eval_result`` / ``export_results`` are those of the last evaluation (None before).
    """

    def __init__(
        self, estimator: ExportingEstimator, spec: EvalSpec, max_steps: int | None, family: Family
    ) -> None:
        self.est, self.spec, self.max_steps, self.family = estimator, spec, max_steps, family
        self.eval_result: dict[str, Any] | None = None
        self.export_results: list[bytes | None] | None = None
        self._previous_path: str | None = None
        self._last_notice = -math.inf  # when "nothing new" was last logged

    def _notice(self, level: int, message: str, *args: object) -> None:
        """Log that there is nothing new to evaluate, at most once per 10 minutes (a
        separate evaluator looks every few seconds; tf.estimator's rate)."""
        now = time.monotonic()
        if now - self._last_notice >= NOTICE_INTERVAL_SECS:
            self._last_notice = now
            _log.log(level, message, *args)

    def evaluate_and_export(self) -> bool:
        """Evaluate and export the newest checkpoint unless it was done already; True
        when it evaluated."""
        path = self.family.latest_checkpoint(self.est)
        if not path:
            self._notice(logging.WARNING, "No checkpoint to evaluate yet.")
            return False
        if path == self._previous_path:
            self._notice(logging.INFO, "Checkpoint %s was evaluated already; skipping it.", path)
            return False
        metrics = self.est.evaluate(
            self.spec.input_fn,
            steps=self.spec.steps,
            hooks=self.spec.hooks,
            checkpoint_path=path,
            name=self.spec.name,
        )
        # tf.estimator's rule: the final export is the one at (or past) max_steps.
        final = self.max_steps is not None and int(metrics["global_step"]) >= self.max_steps
        base = os.path.join(os.fspath(self.est.model_dir), "export")
        self.export_results = [
            exporter.export(self.est, os.path.join(base, exporter.name), path, metrics, final)
            for exporter in self.spec.exporters
        ]
        self.eval_result, self._previous_path = metrics, path
        self._last_notice = -math.inf
        return True

    def reached_max_steps(self) -> bool:
        """The last evaluated checkpoint is at (or past) ``max_steps`` (never with
        ``max_steps=None``): a separate evaluator's cue to end."""
        if self.eval_result is None or self.max_steps is None:
            return False
        return int(self.eval_result["global_step"]) >= self.max_steps


class EvaluateOnSave:
    """The CheckpointSaverListener behaviour of tf.estimator's local train_and_evaluate:
    after a save, evaluate when ``throttle_secs`` passed since the last evaluation
    started; at the end of training, evaluate the last checkpoint unless it just was.
    Mixed into the listener class of each Estimator family (``listener_for``)."""

    def __init__(self, evaluator: CheckpointEvaluator) -> None:
        self.evaluator = evaluator
        self._last_step: int | None = None
        self._last_time = 0.0
        self._skip_next = False

    def begin(self) -> None:
        self._last_step, self._skip_next = None, self.evaluator.family.saves_at_creation

    def after_save(self, session: object, global_step_value: int) -> None:
        if self._skip_next:  # the save made when the session was created
            self._skip_next = False
            return
        throttle = self.evaluator.spec.throttle_secs
        due = self._last_step is None or (
            global_step_value != self._last_step and time.time() - self._last_time >= throttle
        )
        if due:
            self._evaluate(global_step_value)
        else:
            _log.info("Checkpoint at step %d not evaluated: throttle_secs=%s.", global_step_value, throttle)

    def end(self, session: object, global_step_value: int) -> None:
        if global_step_value != self._last_step:
            self._evaluate(global_step_value)

    def _evaluate(self, step: int) -> None:
        self._last_step, self._last_time = step, time.time()
        self.evaluator.evaluate_and_export()


def listener_for(evaluator: CheckpointEvaluator) -> EvaluateOnSave:
    """An EvaluateOnSave that is also an instance of the family's listener base."""
    cls = type("EvaluateOnSaveListener", (EvaluateOnSave, evaluator.family.listener_base), {})
    return cls(evaluator)


def _checked_specs(
    estimator: object, train_spec: object, eval_spec: EvalSpec | Sequence[EvalSpec], family: Family
) -> list[EvalSpec]:
    """``eval_spec`` as a list, after tf.estimator's type checks.

    Raises:
      TypeError: an estimator or spec not of the family's types.
      ValueError: several EvalSpecs share a name.
    """
    if not isinstance(estimator, family.estimator_type):
        raise TypeError(
            f"train_and_evaluate: estimator must be a {family.estimator_type.__name__}, "
            f"got {type(estimator).__name__}."
        )
    if not isinstance(train_spec, family.train_spec_type):
        raise TypeError(
            f"train_and_evaluate: train_spec must be a TrainSpec, got {type(train_spec).__name__}."
        )
    given = list(eval_spec) if isinstance(eval_spec, (list, tuple)) else [eval_spec]
    if not given or not all(isinstance(s, family.eval_spec_type) for s in given):
        raise TypeError("train_and_evaluate: eval_spec must be an EvalSpec (or a list of them).")
    specs = cast("list[EvalSpec]", given)  # the family's EvalSpecs
    if len({s.name for s in specs}) != len(specs):
        raise ValueError("train_and_evaluate: EvalSpecs need distinct names.")
    return specs


def run_train_and_evaluate(
    estimator: ExportingEstimator,
    train_spec: TrainSpec,
    eval_spec: EvalSpec | Sequence[EvalSpec],
    family: Family,
) -> EvalOutcome | list[EvalOutcome]:
    """The shared driver (see ``train_and_evaluate``); returns what it documents.

    Raises:
      TypeError: an estimator or spec not of the family's types.
      ValueError: several EvalSpecs share a name.
    """
    specs = _checked_specs(estimator, train_spec, eval_spec, family)
    evaluators = [CheckpointEvaluator(estimator, s, train_spec.max_steps, family) for s in specs]
    timed = [ev for ev in evaluators if ev.spec.every_n_steps is None]
    by_steps = [ev for ev in evaluators if ev.spec.every_n_steps is not None]
    listeners = list(train_spec.saving_listeners) + [listener_for(ev) for ev in timed]
    if not by_steps:
        estimator.train(
            train_spec.input_fn,
            hooks=train_spec.hooks,
            max_steps=train_spec.max_steps,
            saving_listeners=listeners,
        )
    else:
        _train_in_chunks(estimator, train_spec, by_steps, listeners, family)
    results = [(ev.eval_result, ev.export_results) for ev in evaluators]
    return results if isinstance(eval_spec, (list, tuple)) else results[0]


def _train_in_chunks(
    estimator: ExportingEstimator,
    train_spec: TrainSpec,
    evaluators: list[CheckpointEvaluator],
    listeners: list[object],
    family: Family,
) -> None:
    """``every_n_steps`` (beyond TF): train to the next multiple of the smallest N,
    evaluate the specs whose multiple was crossed; at the end evaluate the last
    checkpoint for every spec that has not seen it."""
    chunk = min(cast(int, ev.spec.every_n_steps) for ev in evaluators)  # each has one
    while True:
        start = family.latest_step(estimator)
        if train_spec.max_steps is not None and start >= train_spec.max_steps:
            break
        target = (start // chunk + 1) * chunk
        if train_spec.max_steps is not None:
            target = min(target, train_spec.max_steps)
        estimator.train(
            train_spec.input_fn, hooks=train_spec.hooks, max_steps=target, saving_listeners=listeners
        )
        reached = family.latest_step(estimator)
        for ev in evaluators:
            every = cast(int, ev.spec.every_n_steps)
            if reached // every > start // every:
                ev.evaluate_and_export()
        if reached < target:  # the input ended
            break
    for ev in evaluators:
        ev.evaluate_and_export()  # a no-op for a spec that evaluated the last checkpoint


def evaluate_continuously(
    estimator: ExportingEstimator,
    train_spec: TrainSpec,
    eval_spec: EvalSpec,
    family: Family,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> EvalOutcome:
    """What a separate evaluator task does in tf.estimator's distributed
    train_and_evaluate: wait ``start_delay_secs``, then evaluate (and export) the newest
    checkpoint whenever there is a new one, starting evaluations at least
    ``throttle_secs`` apart, until an evaluated checkpoint's global step reaches
    ``train_spec.max_steps`` (with ``max_steps=None`` it never ends, as TF). A checkpoint
    is evaluated at most once; one the trainers wrote and replaced between two looks is
    not evaluated (as TF). With ``throttle_secs=0`` it looks at model_dir every
    ``POLL_SECS`` (1 s) while there is nothing new, where TF polls without pause.

    Args:
      sleep, clock: ``time.sleep`` and ``time.monotonic`` (seconds), replaceable by tests.

    Returns:
      The last ``(eval_result, export_results)``.
    """
    evaluator = CheckpointEvaluator(estimator, eval_spec, train_spec.max_steps, family)
    if eval_spec.start_delay_secs:
        _log.info("Waiting %s s before the first evaluation.", eval_spec.start_delay_secs)
        sleep(eval_spec.start_delay_secs)
    while True:
        started = clock()
        evaluated = evaluator.evaluate_and_export()
        if evaluator.reached_max_steps():
            _log.info(
                "Evaluated global step %s >= max_steps %s: the evaluator ends.",
                cast("dict[str, Any]", evaluator.eval_result)["global_step"],
                train_spec.max_steps,
            )
            return evaluator.eval_result, evaluator.export_results
        wait = eval_spec.throttle_secs - (clock() - started)
        if wait <= 0 and not eval_spec.throttle_secs and not evaluated:
            wait = POLL_SECS
        if wait > 0:
            sleep(wait)


def check_cluster_task(task_type: str, task_id: int) -> None:
    """tf.estimator's rule for the task of a cluster's train_and_evaluate: one
    evaluator, index 0 (a pure-Python rule both families can share).

    Raises:
      ValueError: an evaluator index > 0, or a task type with no part here.
    """
    if task_type == EVALUATOR and task_id > 0:
        raise ValueError(
            f"train_and_evaluate: a cluster has one evaluator task, index 0; this one has index {task_id}."
        )
    if task_type not in (CHIEF, WORKER, EVALUATOR):
        raise ValueError(
            f"train_and_evaluate: task type {task_type!r} has no part (chief, worker or evaluator)."
        )


def _check_cluster_specs(specs: list[EvalSpec]) -> None:
    """Raises ValueError for several EvalSpecs or ``every_n_steps`` in a cluster (both
    need the local driver)."""
    if len(specs) != 1:
        raise ValueError("train_and_evaluate: in a TF_CONFIG cluster, eval_spec is one EvalSpec, as in TF.")
    if specs[0].every_n_steps is not None:
        raise ValueError(
            "train_and_evaluate: EvalSpec.every_n_steps needs the local driver; in a TF_CONFIG "
            "cluster the evaluator task evaluates each new checkpoint (use throttle_secs)."
        )


def run_cluster_task(
    estimator: ExportingEstimator,
    train_spec: TrainSpec,
    eval_spec: EvalSpec | Sequence[EvalSpec],
    task: tuple[str, int],
    family: Family,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> EvalOutcome | None:
    """This process's part of a TF_CONFIG cluster's train_and_evaluate (``task`` is
    ``(type, index)``), as tf.estimator's ``_TrainingExecutor``: ``chief`` and
    ``worker`` train and never evaluate (the TrainSpec's saving listeners on the chief
    only); ``evaluator`` runs ``evaluate_continuously``. Returns the evaluator's last
    ``(eval_result, export_results)``, None on the other tasks (TF returns nothing).

    Unlike tf.estimator, a worker does not wait ``5 * (index + 1)`` seconds before
    training: JAX's processes train in lock step, so a delay would hold up all of them.

    Raises:
      TypeError: an estimator or spec not of the family's types.
      ValueError: an evaluator index > 0, a task type with no part, several EvalSpecs
        or an ``EvalSpec.every_n_steps`` (both need the local driver).
    """
    check_cluster_task(*task)  # before anything else, as TF
    specs = _checked_specs(estimator, train_spec, eval_spec, family)
    _check_cluster_specs(specs)
    if task[0] == EVALUATOR:
        return evaluate_continuously(estimator, train_spec, specs[0], family, sleep, clock)
    listeners = list(train_spec.saving_listeners) if task[0] == CHIEF else []
    estimator.train(
        train_spec.input_fn,
        hooks=train_spec.hooks,
        max_steps=train_spec.max_steps,
        saving_listeners=listeners,
    )
    return None


def _jaxspec_latest_checkpoint(estimator: Estimator) -> str | None:
    store = estimator._checkpoint_store()
    store.wait()  # Orbax saves in the background; evaluate complete checkpoints only
    store.refresh()  # a separate evaluator: the trainers' processes write the checkpoints
    step = store.latest_step()
    return None if step is None else store.path(step)


def _jaxspec_latest_step(estimator: Estimator) -> int:
    store = estimator._checkpoint_store()
    store.wait()
    return store.latest_step() or 0


def _jaxspec_family() -> Family:
    return Family(
        estimator_type=Estimator,
        train_spec_type=TrainSpec,
        eval_spec_type=EvalSpec,
        listener_base=CheckpointSaverListener,
        latest_checkpoint=_jaxspec_latest_checkpoint,
        latest_step=_jaxspec_latest_step,
        saves_at_creation=True,  # CheckpointSaverHook.after_create_session, as TF's
    )


def train_and_evaluate(
    estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec | Sequence[EvalSpec]
) -> EvalOutcome | list[EvalOutcome] | None:
    """Train, evaluating (and exporting) along the way, as ``tf.estimator.train_and_evaluate``.

    Locally (no TF_CONFIG, or a cluster given as ``RunConfig(cluster=...)``, where every
    process trains and evaluates together): a CheckpointSaverListener evaluates after a
    checkpoint save once ``throttle_secs`` passed since the last evaluation, and once more
    at the end of training unless the last checkpoint was just evaluated; no checkpoint
    is evaluated or exported twice.
    Exporters run after each evaluation, with ``is_the_final_export=True`` when the
    evaluated global step is >= ``train_spec.max_steps`` (as TF: never with
    ``max_steps=None``). Beyond TF: EvalSpecs with ``every_n_steps`` make training run
    in chunks of that many steps with an evaluation after each (input_fn is called again
    per chunk, as after any restart); several EvalSpecs may be given, each writing to
    its own ``eval_<name>`` directory.

    In a TF_CONFIG cluster each process does its task's part, as tf.estimator's
    distributed mode (``run_cluster_task``): the ``chief`` and the ``worker`` tasks join
    ``jax.distributed`` and train, without evaluating; the ``evaluator`` task (index 0)
    joins nothing, runs alone on its own devices and evaluates and exports each new
    checkpoint the trainers write to model_dir, ``start_delay_secs`` after it starts and
    at most once per ``throttle_secs``, until one at ``train_spec.max_steps``.

    Returns:
      ``(eval_result, export_results)`` of the last evaluation: the metrics dict and one
      entry per exporter, the export directory (bytes) it wrote or None;
      ``(None, None)`` when nothing was evaluated (training had already reached
      max_steps). With a list of EvalSpecs, a list of those pairs. In a cluster: the
      evaluator's last pair; None on the chief and the workers, as tf.estimator.

    Raises:
      TypeError: an estimator or spec of the wrong type.
      ValueError: several EvalSpecs share a name; in a cluster, an evaluator index > 0,
        several EvalSpecs or ``every_n_steps``; a TF_CONFIG task type other than chief,
        worker or evaluator.
    """
    task = run_config_task(getattr(getattr(estimator, "config", None), "cluster", None))
    if task is not None and isinstance(estimator, Estimator):
        return run_cluster_task(estimator, train_spec, eval_spec, task, _jaxspec_family())
    return run_train_and_evaluate(estimator, train_spec, eval_spec, _jaxspec_family())
