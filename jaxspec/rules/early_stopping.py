"""tf.estimator.experimental's early stopping, as rules both sides share: when a stop is
due (``threshold_crossed``, ``no_improvement``), the arguments of
``make_early_stopping_hook`` (``check_early_stopping_args``), and the four ``stop_if_*``
factories built from one side's ``make_early_stopping_hook`` and ``read_eval_metrics``
(``EarlyStoppingFactories``). The hooks themselves (a JAX loop's, a TF session's) stay on
their side."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

_log = logging.getLogger("jaxspec")


class EvalDirOwner(Protocol):
    """What the factories read of an Estimator (either side's): its evaluation directory."""

    def eval_dir(self, name: str | None = None) -> str: ...


# The side's hook class, which its ``build`` returns.
Hook = TypeVar("Hook")
# ``build(estimator, should_stop_fn, run_every_secs, run_every_steps)``: the side's hook.
BuildHook = Callable[[EvalDirOwner, Callable[[], bool], "float | None", "int | None"], Hook]
# ``read_eval_metrics(eval_dir)``: ``{global_step: {tag: value}}``.
ReadMetrics = Callable[[str], Mapping[int, dict[str, float]]]


def check_early_stopping_args(
    should_stop_fn: object, run_every_secs: float | None, run_every_steps: int | None
) -> None:
    """``make_early_stopping_hook``'s argument rules.

    Raises:
      TypeError: ``should_stop_fn`` is not callable.
      ValueError: both ``run_every_secs`` and ``run_every_steps`` are set.
    """
    if not callable(should_stop_fn):
        raise TypeError(f"should_stop_fn must be callable, got {type(should_stop_fn).__name__}.")
    if run_every_secs is not None and run_every_steps is not None:
        raise ValueError("make_early_stopping_hook: set run_every_secs or run_every_steps, not both.")


def _metric(metrics: dict[str, float], name: str, eval_dir: str) -> float:
    if name not in metrics:
        raise KeyError(
            f"metric_name {name!r} is not among the eval results in {eval_dir}: {sorted(metrics)}."
        )
    return metrics[name]


def threshold_crossed(
    read: ReadMetrics,
    directory: str,
    metric_name: str,
    threshold: float,
    higher: bool,
    min_steps: int,
) -> Callable[[], bool]:
    """``() -> bool``: has an evaluation at global step >= ``min_steps`` reported
    ``metric_name`` above (``higher``) or below ``threshold``? ``read(directory)`` gives
    ``{global_step: {tag: value}}`` (``read_eval_metrics``).

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
    read: ReadMetrics,
    directory: str,
    metric_name: str,
    max_steps_without_improvement: int,
    higher: bool,
    min_steps: int,
) -> Callable[[], bool]:
    """``() -> bool``: has ``metric_name`` gone ``max_steps_without_improvement`` global
    steps of evaluations (from ``min_steps`` on) without a new best (higher is better
    with ``higher``)? ``read`` as in ``threshold_crossed``;

    Raises (when called):
      KeyError: an evaluation lacks ``metric_name``.
    """
    better = operator.gt if higher else operator.lt

    def stalled() -> bool:
        best: float | None = None
        best_step = 0  # set with best, at the first evaluation counted
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


class EarlyStoppingFactories(Generic[Hook]):
    """tf.estimator.experimental's ``make_early_stopping_hook`` and its four ``stop_if_*``
    factories, over one side's parts: ``check_estimator(estimator)`` (TypeError for an
    Estimator of the other side), ``build(estimator, should_stop_fn, run_every_secs,
    run_every_steps)`` (the side's hook) and ``read(eval_dir) -> {global_step: {tag:
    value}}``. Each side binds its own instance's methods to its public names."""

    def __init__(
        self, check_estimator: Callable[[object], None], build: BuildHook[Hook], read: ReadMetrics
    ) -> None:
        self._check_estimator = check_estimator
        self._build = build
        self._read = read

    def make_early_stopping_hook(
        self,
        estimator: EvalDirOwner,
        should_stop_fn: Callable[[], bool],
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> Hook:
        """A hook that stops training once ``should_stop_fn()`` returns True
        (``tf.estimator.experimental.make_early_stopping_hook``).

        Args:
          estimator: the Estimator being trained (of the side this function belongs to).
          should_stop_fn: ``() -> bool``.
          run_every_secs: seconds between calls (float, default 60).
          run_every_steps: or global steps between calls (int); set only one of the two.

        Raises:
          TypeError: ``estimator`` is not an Estimator of this side, or
            ``should_stop_fn`` is not callable.
          ValueError: both run_every_secs and run_every_steps are set.
        """
        self._check_estimator(estimator)
        check_early_stopping_args(should_stop_fn, run_every_secs, run_every_steps)
        return self._build(estimator, should_stop_fn, run_every_secs, run_every_steps)

    def _threshold(
        self, estimator: EvalDirOwner, metric_name: str, threshold: float, higher: bool, **kw: Any
    ) -> Hook:
        directory = kw["eval_dir"] or estimator.eval_dir()
        crossed = threshold_crossed(self._read, directory, metric_name, threshold, higher, kw["min_steps"])
        return self.make_early_stopping_hook(estimator, crossed, kw["run_every_secs"], kw["run_every_steps"])

    def _no_improvement(
        self, estimator: EvalDirOwner, metric_name: str, max_steps: int, higher: bool, **kw: Any
    ) -> Hook:
        directory = kw["eval_dir"] or estimator.eval_dir()
        stalled = no_improvement(self._read, directory, metric_name, max_steps, higher, kw["min_steps"])
        return self.make_early_stopping_hook(estimator, stalled, kw["run_every_secs"], kw["run_every_steps"])

    def stop_if_higher_hook(
        self,
        estimator: EvalDirOwner,
        metric_name: str,
        threshold: float,
        eval_dir: str | None = None,
        min_steps: int = 0,
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> Hook:
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
          TypeError, ValueError: as ``make_early_stopping_hook``.
        """
        args = dict(eval_dir=eval_dir, min_steps=min_steps, run_every_secs=run_every_secs)
        return self._threshold(
            estimator, metric_name, threshold, True, **args, run_every_steps=run_every_steps
        )

    def stop_if_lower_hook(
        self,
        estimator: EvalDirOwner,
        metric_name: str,
        threshold: float,
        eval_dir: str | None = None,
        min_steps: int = 0,
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> Hook:
        """Stop once an evaluation at global step >= ``min_steps`` has ``metric_name`` <
        ``threshold`` (``tf.estimator.experimental.stop_if_lower_hook``); arguments and
        errors as ``stop_if_higher_hook``."""
        args = dict(eval_dir=eval_dir, min_steps=min_steps, run_every_secs=run_every_secs)
        return self._threshold(
            estimator, metric_name, threshold, False, **args, run_every_steps=run_every_steps
        )

    def stop_if_no_increase_hook(
        self,
        estimator: EvalDirOwner,
        metric_name: str,
        max_steps_without_increase: int,
        eval_dir: str | None = None,
        min_steps: int = 0,
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> Hook:
        """Stop once ``metric_name`` has not increased for ``max_steps_without_increase``
        global steps: an evaluation that many steps after the best one (evaluations before
        ``min_steps`` ignored), as ``tf.estimator.experimental.stop_if_no_increase_hook``;
        other arguments and errors as ``stop_if_higher_hook``."""
        args = dict(eval_dir=eval_dir, min_steps=min_steps, run_every_secs=run_every_secs)
        return self._no_improvement(
            estimator, metric_name, max_steps_without_increase, True, **args, run_every_steps=run_every_steps
        )

    def stop_if_no_decrease_hook(
        self,
        estimator: EvalDirOwner,
        metric_name: str,
        max_steps_without_decrease: int,
        eval_dir: str | None = None,
        min_steps: int = 0,
        run_every_secs: float | None = 60,
        run_every_steps: int | None = None,
    ) -> Hook:
        """Stop once ``metric_name`` has not decreased for ``max_steps_without_decrease``
        global steps (``tf.estimator.experimental.stop_if_no_decrease_hook``); see
        ``stop_if_no_increase_hook``."""
        args = dict(eval_dir=eval_dir, min_steps=min_steps, run_every_secs=run_every_secs)
        return self._no_improvement(
            estimator, metric_name, max_steps_without_decrease, False, **args, run_every_steps=run_every_steps
        )
