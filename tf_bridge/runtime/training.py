"""``train_and_evaluate``, ``TrainSpec``, ``EvalSpec`` and the exporters for TensorFlow
model_fns (``tf.estimator.train_and_evaluate`` and friends).

The driver is jaxspec's (``jaxspec.estimators.training.run_train_and_evaluate``): the same
evaluate-after-checkpoint listener, throttling, one evaluation and export per
checkpoint and return value; here it runs a ``tf_bridge.Estimator`` with TensorFlow's
hooks and CheckpointSaverListeners. The exporters are jaxspec's classes: they only call
``estimator.export_saved_model``. With a ``TF_CONFIG`` cluster, each task does its part
(``tf_bridge.runtime.cluster_training``).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from jaxspec.estimators import training as _shared
from jaxspec.estimators.exporter import BestExporter, Exporter, FinalExporter, LatestExporter
from tf_bridge.runtime import cluster_training
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.runner.train import load_global_step


class TrainSpec(_shared.TrainSpec):
    """The training half of train_and_evaluate (``tf.estimator.TrainSpec``).

    Args:
      input_fn: the training input_fn.
      max_steps: absolute global step to stop at (None: until the input ends).
      hooks: ``tf.compat.v1.train.SessionRunHook``s for training.
      saving_listeners: ``tf.compat.v1.train.CheckpointSaverListener``s (chief only).

    Raises:
      TypeError: input_fn not callable, a hook or listener of another type.
      ValueError: max_steps <= 0.
    """

    _hook_type = tf.compat.v1.train.SessionRunHook
    _listener_type = tf.compat.v1.train.CheckpointSaverListener


class EvalSpec(_shared.EvalSpec):
    """The evaluation half of train_and_evaluate (``tf.estimator.EvalSpec``); the
    arguments, defaults and errors of ``jaxspec.estimators.training.EvalSpec``, with
    ``tf.compat.v1.train.SessionRunHook``s as hooks."""

    _hook_type = tf.compat.v1.train.SessionRunHook


def _latest_checkpoint(estimator: Estimator) -> str | None:
    return estimator.latest_checkpoint()


def _latest_step(estimator: Estimator) -> int:
    return load_global_step(estimator.model_dir)


FAMILY = _shared.Family(
    estimator_type=Estimator,
    train_spec_type=TrainSpec,
    eval_spec_type=EvalSpec,
    listener_base=tf.compat.v1.train.CheckpointSaverListener,
    latest_checkpoint=_latest_checkpoint,
    latest_step=_latest_step,
    saves_at_creation=True,
)


def train_and_evaluate(
    estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec | Sequence[EvalSpec]
) -> _shared.EvalOutcome | list[_shared.EvalOutcome] | None:
    """Train a tf_bridge Estimator, evaluating and exporting along the way
    (``tf.estimator.train_and_evaluate``, TF 2.15 behaviour).

    Without a cluster in ``estimator.config`` (no ``TF_CONFIG``), one process trains and
    evaluates: after each checkpoint save (not the one made when the session starts)
    evaluation runs once ``eval_spec.throttle_secs`` passed since the last one started,
    and at the end of training on the last checkpoint unless it was just evaluated; the
    exporters run after each evaluation, ``is_the_final_export`` True when the evaluated
    global step is >= ``train_spec.max_steps``. Results go to ``model_dir/eval`` or
    ``eval_<name>``; exports to ``model_dir/export/<exporter name>/<timestamp>``.
    Beyond TF (as jaxspec): a list of EvalSpecs, and ``EvalSpec(every_n_steps=N)``.

    With a cluster (or as the ``evaluator`` task), the task named by
    ``config.task_type`` runs its part: ``chief`` and ``worker`` train between-graph,
    variables on the parameter servers; ``ps`` serves them until the process ends;
    ``evaluator`` evaluates each new checkpoint until one at ``max_steps``; ``master``
    trains and evaluates (see ``tf_bridge.runtime.cluster_training``).

    Returns:
      Locally: ``(eval_result, export_results)`` of the last evaluation (metrics dict;
      per exporter the export directory as bytes, or None), ``(None, None)`` when
      nothing was evaluated. In a cluster: the evaluator's last pair; None for the
      other tasks, as tf.estimator.

    Raises:
      TypeError: an estimator that is not a tf_bridge Estimator, or specs of another type.
      ValueError: EvalSpecs sharing a name; in a cluster, an evaluator index > 0 or a
        task type with no part.
      RuntimeError: a task's server cannot start.
    """
    config = getattr(estimator, "config", None)
    if isinstance(estimator, Estimator) and (config.cluster_spec.jobs or config.task_type == "evaluator"):
        return cluster_training.run_task(estimator, train_spec, eval_spec, FAMILY)
    return _shared.run_train_and_evaluate(estimator, train_spec, eval_spec, FAMILY)


__all__ = [
    "BestExporter",
    "EvalSpec",
    "Exporter",
    "FinalExporter",
    "LatestExporter",
    "TrainSpec",
    "train_and_evaluate",
]
