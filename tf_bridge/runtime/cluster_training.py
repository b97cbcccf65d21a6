"""train_and_evaluate in a TF_CONFIG cluster: each task runs its part, as
tf.estimator's distributed train_and_evaluate did (between-graph replication on
TensorFlow's own runtime).

- ``chief``: starts its server and trains (checkpoints, summaries, the TrainSpec's
  saving listeners); it does not evaluate.
- ``worker``: starts its server, waits ``min((index + 1) * 5, 60)`` seconds
  (``RunConfig.experimental_max_worker_delay_secs`` caps it) and trains; its chief-only
  hooks do not run.
- ``master`` (the legacy layout): trains like the chief and evaluates after its
  checkpoints, like a local run.
- ``ps``: starts its server and serves variables until the process is ended.
- ``evaluator``: evaluates (and exports) each new checkpoint until one at
  ``max_steps`` (``jaxspec.estimators.training.evaluate_continuously``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from jaxspec.estimators import training as _shared
from tf_bridge.runtime.runner.cluster import start_server

if TYPE_CHECKING:
    from tf_bridge.runtime.runner.estimator import Estimator

_log = logging.getLogger("tf_bridge")

DELAY_SECS_PER_WORKER = 5
MAX_DELAY_SECS = 60
TASKS = ("chief", "worker", "master", "ps", "evaluator")


def _check(estimator: object, train_spec: object, eval_spec: object, family: _shared.Family) -> None:
    if not isinstance(estimator, family.estimator_type):
        raise TypeError(
            f"train_and_evaluate: estimator must be a tf_bridge Estimator, got {type(estimator).__name__}."
        )
    if not isinstance(train_spec, family.train_spec_type):
        raise TypeError(
            f"train_and_evaluate: train_spec must be a TrainSpec, got {type(train_spec).__name__}."
        )
    if not isinstance(eval_spec, family.eval_spec_type):
        raise TypeError(f"train_and_evaluate: eval_spec must be an EvalSpec, got {type(eval_spec).__name__}.")


def _train(
    estimator: Estimator,
    train_spec: _shared.TrainSpec,
    listeners: list[object],
    sleep: Callable[[float], None],
) -> None:
    config = estimator.config
    start_server(config)
    if config.task_type == "worker":
        cap = MAX_DELAY_SECS
        if config.experimental_max_worker_delay_secs is not None:
            cap = int(config.experimental_max_worker_delay_secs)
        delay = min(cap, (config.task_id + 1) * DELAY_SECS_PER_WORKER)
        if delay > 0:
            _log.info("Worker %d waits %d s before training.", config.task_id, delay)
            sleep(delay)
    estimator.train(
        input_fn=train_spec.input_fn,
        max_steps=train_spec.max_steps,
        hooks=list(train_spec.hooks),
        saving_listeners=listeners,
    )


def run_task(
    estimator: Estimator,
    train_spec: _shared.TrainSpec,
    eval_spec: _shared.EvalSpec | Sequence[_shared.EvalSpec],
    family: _shared.Family,
    sleep: Callable[[float], None] = time.sleep,
) -> _shared.EvalOutcome | None:
    """Run this process's part of a cluster's train_and_evaluate (see the module
    docstring). Returns the evaluator's last ``(eval_result, export_results)``, None for
    the other tasks (tf.estimator returned nothing there).

    Raises:
      TypeError: an estimator or spec of another type.
      ValueError: no task type, ``local``, a type with no part, an evaluator index > 0.
      RuntimeError: the server cannot start (see ``start_server``).
    """
    _check(estimator, train_spec, eval_spec, family)
    config = estimator.config
    task = config.task_type
    if task == "evaluator" and config.task_id > 0:
        raise ValueError(
            f"train_and_evaluate: only one evaluator task (index 0) may run; got index {config.task_id}."
        )
    if not task:
        raise ValueError("train_and_evaluate: the cluster needs a task type (TF_CONFIG's task.type).")
    if task == "local":
        raise ValueError(
            "train_and_evaluate: task type 'local' is not a cluster task; leave TF_CONFIG unset instead."
        )
    if task not in TASKS:
        raise ValueError(f"train_and_evaluate: task type {task!r} has no part; expected one of {TASKS}.")
    if task == "ps":
        server = start_server(config)
        server.join()  # serves until the process is ended
        return None
    if task == "evaluator":
        return _shared.evaluate_continuously(estimator, train_spec, eval_spec, family, sleep)
    listeners = list(train_spec.saving_listeners) if task in ("chief", "master") else []
    if task == "master":
        evaluator = _shared.CheckpointEvaluator(estimator, eval_spec, train_spec.max_steps, family)
        listeners.append(_shared.listener_for(evaluator))
    _train(estimator, train_spec, listeners, sleep)
    return None
