"""``InMemoryEvaluatorHook`` (``tf.estimator.experimental.InMemoryEvaluatorHook``):
evaluate during training, in the training process, from the training session's variables
instead of a checkpoint."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import InputFn
from tf_bridge.runtime.runner.estimator import Estimator, check_hooks
from tf_bridge.runtime.runner.evaluate import build_eval_graph, evaluate_once, write_dict_to_summary
from tf_bridge.runtime.runner_hooks import StopAfterNEvalsHook

_log = logging.getLogger("tf_bridge")


class InMemoryEvaluatorHook(tf.compat.v1.train.SessionRunHook):
    """Runs ``estimator.evaluate(input_fn, steps, hooks, name)`` every ``every_n_iter``
    training runs, once after the session is created and once at the end, as TF did.

    The evaluation graph is built once, in its own ``tf.Graph``, at ``begin``; each
    evaluation copies the values of the global variables both graphs share (by name)
    from the training session, then runs the evaluation loop and writes its summaries to
    ``estimator.eval_dir(name)``. The latest results are in ``results``.

    Args:
      estimator: the tf_bridge Estimator being trained.
      input_fn: evaluation input_fn.
      steps: evaluation batches (None: the whole input).
      hooks: hooks for the evaluation.
      name: evaluation name (``eval_<name>`` directory).
      every_n_iter: training runs between evaluations (> 0).

    Raises:
      ValueError: every_n_iter <= 0; a cluster with parameter servers or several
        trainers (TF_CONFIG); (begin) the eval scaffold has its own saver or
        init_fn; (after_create_session) the training graph has saveables other than
        global variables.
      TypeError: estimator is not a tf_bridge Estimator.
    """

    def __init__(
        self,
        estimator: Estimator,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        name: str | None = None,
        every_n_iter: int = 100,
    ) -> None:
        if not isinstance(estimator, Estimator):
            raise TypeError(f"estimator must be a tf_bridge Estimator, got {type(estimator).__name__}.")
        if every_n_iter is None or every_n_iter <= 0:
            raise ValueError(f"every_n_iter must be > 0, got {every_n_iter}.")
        config = estimator.config
        if config.num_ps_replicas > 0 or config.num_worker_replicas > 1:
            raise ValueError(
                "InMemoryEvaluatorHook runs in one training process only; the cluster has "
                f"{config.num_worker_replicas} trainers and {config.num_ps_replicas} parameter servers."
            )
        summary_steps = estimator.config.save_summary_steps
        if summary_steps and every_n_iter % summary_steps != 0:
            _log.warning(
                "every_n_iter=%d is not a multiple of save_summary_steps=%d: evaluation and training "
                "summaries will fall on different steps.",
                every_n_iter,
                summary_steps,
            )
        # The Estimator's one door to its runner: the EVAL plan, built once here.
        self._plan = estimator._run_plan(ModeKeys.EVAL)
        self._input_fn = input_fn
        self._hooks = check_hooks(hooks)
        if steps is not None:
            self._hooks.append(StopAfterNEvalsHook(steps))
        self._eval_dir = estimator.eval_dir(name)
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_steps=every_n_iter)
        self._iterations = 0
        self.results: dict[str, Any] | None = None

    def begin(self) -> None:
        self._timer.reset()
        self._iterations = 0
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._built = build_eval_graph(self._plan, self._input_fn, self._hooks, None)
            scaffold = self._built[0]
            if scaffold.saver is not None:
                raise ValueError("InMemoryEvaluatorHook cannot use a scaffold with its own saver.")
            if scaffold.init_fn is not None:
                raise ValueError("InMemoryEvaluatorHook cannot use a scaffold with its own init_fn.")
            self._eval_vars = {v.name: v for v in tf.compat.v1.global_variables()}
            self._placeholders = {
                n: tf.compat.v1.placeholder(v.dtype.base_dtype) for n, v in self._eval_vars.items()
            }

    def after_create_session(self, session: tf.compat.v1.Session, coord: tf.train.Coordinator) -> None:
        if tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
            raise ValueError(
                "InMemoryEvaluatorHook copies global variables only; the graph has other saveables."
            )
        train_vars = {v.name: v for v in tf.compat.v1.global_variables()}
        shared = sorted(set(train_vars) & set(self._eval_vars))
        self._train_vars = {n: train_vars[n] for n in shared}
        with self._graph.as_default():
            self._copy_op = tf.group([self._eval_vars[n].assign(self._placeholders[n]) for n in shared])
        self._evaluate(session)

    def _evaluate(self, train_session: tf.compat.v1.Session) -> None:
        values = train_session.run(self._train_vars)
        feed = {self._placeholders[n]: value for n, value in values.items()}

        def copy_variables(scaffold: tf.compat.v1.train.Scaffold, session: tf.compat.v1.Session) -> None:
            session.run(self._copy_op, feed_dict=feed)

        built_scaffold, update_op, metric_values, hooks = self._built
        with self._graph.as_default():
            scaffold = tf.compat.v1.train.Scaffold(init_fn=copy_variables, copy_from_scaffold=built_scaffold)
            self.results = evaluate_once(self._plan, None, scaffold, update_op, metric_values, hooks)
            write_dict_to_summary(self._eval_dir, self.results, int(self.results["global_step"]))
        self._timer.update_last_triggered_step(self._iterations)

    def after_run(
        self,
        run_context: tf.compat.v1.train.SessionRunContext,
        run_values: tf.compat.v1.train.SessionRunValues,
    ) -> None:
        self._iterations += 1
        if self._timer.should_trigger_for_step(self._iterations):
            self._evaluate(run_context.session)

    def end(self, session: tf.compat.v1.Session) -> None:
        self._evaluate(session)
