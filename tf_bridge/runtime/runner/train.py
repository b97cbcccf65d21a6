"""``Estimator.train`` for TensorFlow model_fns: graph, hooks, MonitoredTrainingSession.

This follows tf.estimator (2.15) step by step, so a model_fn computes exactly what it
computed there: the same graph-level seed, global step, loss summary, Saver (sharded,
relative paths, ``keep_checkpoint_max``), CheckpointSaverHook, NanTensorHook,
LoggingTensorHook and MonitoredTrainingSession arguments. One addition: with
``iterations_per_loop > 1`` (the NPU path) one loop runs that many steps, the hooks seeing
only the last one, as on an NPU where a ``Session.run`` runs a whole loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf
from tensorflow.python.training import training as tf_training
from tensorflow.python.training import training_util

from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.runtime.runner.cluster import device_function
from tf_bridge.runtime.runner.plan import TFRunPlan, TrainPlan
from tf_bridge.runtime.runner_hooks import HostCallFetchHook
from tf_bridge.runtime.step_read_order import order_step_writes_after_read

if TYPE_CHECKING:
    from tf_bridge.runtime.run_config import RunConfig
    from tf_bridge.runtime.spec import EstimatorSpec

_log = logging.getLogger("tf_bridge")


def load_global_step(model_dir: str) -> int:
    """The global step of model_dir's latest checkpoint, 0 without one."""
    path = tf.train.latest_checkpoint(model_dir)
    if not path:
        return 0
    try:
        return int(tf.train.load_variable(path, tf.compat.v1.GraphKeys.GLOBAL_STEP))
    except (tf.errors.NotFoundError, ValueError):
        return 0


def _default_saver(config: RunConfig) -> tf.compat.v1.train.Saver:
    return tf.compat.v1.train.Saver(
        sharded=True,
        max_to_keep=config.keep_checkpoint_max,
        keep_checkpoint_every_n_hours=config.keep_checkpoint_every_n_hours,
        defer_build=True,
        save_relative_paths=True,
    )


def _worker_hooks(
    config: RunConfig,
    spec: EstimatorSpec,
    input_hooks: list[tf.compat.v1.train.SessionRunHook],
    hooks: list[tf.compat.v1.train.SessionRunHook],
    global_step: tf.Variable,
) -> list[tf.compat.v1.train.SessionRunHook]:
    """input hooks, the caller's hooks, NaN check, loss logging, then the spec's hooks."""
    worker = list(input_hooks) + list(hooks)
    worker.append(tf.compat.v1.train.NanTensorHook(spec.loss))
    if config.log_step_count_steps is not None:
        worker.append(
            tf.compat.v1.train.LoggingTensorHook(
                {"loss": spec.loss, "step": global_step}, every_n_iter=config.log_step_count_steps
            )
        )
    worker.extend(spec.training_hooks)
    return worker


def _chief_hooks(
    config: RunConfig,
    spec: EstimatorSpec,
    worker: list[tf.compat.v1.train.SessionRunHook],
    saving_listeners: list[tf.compat.v1.train.CheckpointSaverListener],
) -> list[tf.compat.v1.train.SessionRunHook]:
    """A CheckpointSaverHook unless one is given; saving listeners join the first one.

    Raises:
      ValueError: saving_listeners without checkpoint saving configured.
    """
    saver_hooks = [
        h
        for h in worker + list(spec.training_chief_hooks)
        if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)
    ]
    chief: list[Any] = []
    if (config.save_checkpoints_secs or config.save_checkpoints_steps) and not saver_hooks:
        chief.append(
            tf.compat.v1.train.CheckpointSaverHook(
                config.model_dir,
                save_secs=config.save_checkpoints_secs,
                save_steps=config.save_checkpoints_steps,
                scaffold=spec.scaffold,
                save_graph_def=config.checkpoint_save_graph_def,
            )
        )
        saver_hooks = chief[:]
    if saving_listeners:
        if not saver_hooks:
            raise ValueError(
                "saving_listeners need checkpoint saving: set RunConfig.save_checkpoints_steps or "
                "save_checkpoints_secs (or pass a CheckpointSaverHook)."
            )
        for listener in saving_listeners:
            if listener not in saver_hooks[0]._listeners:
                saver_hooks[0]._listeners.append(listener)
    return chief + list(spec.training_chief_hooks)


def _summary_settings(
    config: RunConfig, spec: EstimatorSpec
) -> tuple[int | None, int | None, list[tf.compat.v1.train.SessionRunHook]]:
    """(save_summaries_steps, log_step_count_steps, extra hooks) of the monitored session.

    In a legacy cluster with ``master`` and ``worker`` jobs, tf.estimator moved the
    summaries and step counting off the master (it also evaluates) to worker 0; so here.
    """
    jobs = config.cluster_spec.jobs
    if not ("master" in jobs and "worker" in jobs):
        return config.save_summary_steps, config.log_step_count_steps, []
    hooks: list[Any] = []
    if config.task_type == "worker" and config.task_id == 0:
        if config.save_summary_steps:
            hooks.append(
                tf.compat.v1.train.SummarySaverHook(
                    save_steps=config.save_summary_steps, output_dir=config.model_dir, scaffold=spec.scaffold
                )
            )
        if config.log_step_count_steps:
            hooks.append(
                tf.compat.v1.train.StepCounterHook(
                    every_n_steps=config.log_step_count_steps, output_dir=config.model_dir
                )
            )
    return 0, None, hooks


# tf.estimator's names of the strategies it trained through its "distributed" session path.
COLLECTIVE_STRATEGIES = (
    "CollectiveAllReduceStrategy",
    "CollectiveAllReduceStrategyV1",
    "MultiWorkerMirroredStrategy",
)


def _session_args(
    config: RunConfig,
    spec: EstimatorSpec,
    worker: list[tf.compat.v1.train.SessionRunHook],
    saving_listeners: list[tf.compat.v1.train.CheckpointSaverListener],
) -> dict[str, Any]:
    """The MonitoredTrainingSession arguments that depend on the path, as tf.estimator's:
    in a cluster with a collective ``train_distribute`` strategy the session itself saves
    checkpoints (``save_checkpoint_secs``/``save_checkpoint_steps`` from the RunConfig),
    summaries and step counts; otherwise the Estimator's CheckpointSaverHook saves and the
    master/worker summary rule applies (``worker`` gains its hooks).

    Raises:
      ValueError: saving_listeners on the collective path (tf.estimator refused them), or
        as ``_chief_hooks``.
    """
    if config.cluster_spec and type(config.train_distribute).__name__ in COLLECTIVE_STRATEGIES:
        if saving_listeners:
            raise ValueError("saving_listeners cannot be used with a collective train_distribute strategy.")
        return {
            "chief_only_hooks": tuple(spec.training_chief_hooks),
            "save_checkpoint_secs": config.save_checkpoints_secs,
            "save_checkpoint_steps": config.save_checkpoints_steps,
            "save_summaries_steps": config.save_summary_steps,
            "log_step_count_steps": config.log_step_count_steps,
        }
    chief = _chief_hooks(config, spec, worker, saving_listeners)
    summary_steps, log_steps, summary_hooks = _summary_settings(config, spec)
    worker.extend(summary_hooks)
    return {
        "chief_only_hooks": chief,
        "save_checkpoint_secs": 0,  # the CheckpointSaverHook saves
        "save_summaries_steps": summary_steps,
        "log_step_count_steps": log_steps,
    }


def _per_step_fetches(hooks: list[tf.compat.v1.train.SessionRunHook]) -> list[PyTree]:
    """What must run at every step even inside a loop: the host calls."""
    return [h.fetches for h in hooks if isinstance(h, HostCallFetchHook) and h.fetches is not None]


def _loop_step_fn(
    spec: EstimatorSpec, global_step: tf.Variable, plan: TrainPlan, per_step: list[PyTree]
) -> Callable[[tf.compat.v1.train.SessionRunContext], np.ndarray]:
    """One loop: up to ``iterations_per_loop`` steps; the last one runs with the hooks."""

    def step_fn(step_context: tf.compat.v1.train.SessionRunContext) -> np.ndarray:
        session = step_context.session
        count = plan.iterations_per_loop
        if plan.last_step is not None:
            count = max(1, min(count, plan.last_step - int(session.run(global_step))))
        for _ in range(count - 1):
            session.run([spec.train_op, per_step])
        return step_context.run_with_hooks([spec.train_op, spec.loss])[1]

    return step_fn


def train_with_spec(
    plan: TFRunPlan,
    spec: EstimatorSpec,
    input_hooks: list[tf.compat.v1.train.SessionRunHook],
    hooks: list[tf.compat.v1.train.SessionRunHook],
    global_step: tf.Variable,
    saving_listeners: list[tf.compat.v1.train.CheckpointSaverListener],
) -> np.ndarray | None:
    """Run the training loop for a built graph; return the last loss seen by the hooks."""
    config = plan.config
    if plan.warm_start is not None and not tf.train.latest_checkpoint(plan.model_dir):
        _log.info("Warm-starting from %s.", plan.warm_start.ckpt_to_initialize_from)
        plan.maybe_warm_start(restoring=False)
    if not any(s.op.name == "loss" for s in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)):
        tf.compat.v1.summary.scalar("loss", spec.loss)
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, spec.loss)
    worker = _worker_hooks(config, spec, input_hooks, hooks, global_step)
    if not (spec.scaffold.saver or tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)):
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, _default_saver(config))
    per_step = _per_step_fetches(worker)
    session_args = _session_args(config, spec, worker, saving_listeners)
    loss, steps = None, 0
    # tf.estimator called MonitoredTrainingSession through this module; so does tf_bridge.
    with tf_training.MonitoredTrainingSession(
        master=config.session_target(),
        is_chief=config.is_chief,
        checkpoint_dir=plan.model_dir,
        scaffold=spec.scaffold,
        hooks=worker,
        config=plan.session_config,
        max_wait_secs=config.session_creation_timeout_secs,
        save_graph_def=config.checkpoint_save_graph_def,
        **session_args,
    ) as session:
        loop = plan.train
        step_fn = _loop_step_fn(spec, global_step, loop, per_step) if loop.iterations_per_loop > 1 else None
        while not session.should_stop():
            steps += 1
            if step_fn is None:
                _, loss = session.run([spec.train_op, spec.loss])
            else:
                loss = session.run_step_fn(step_fn)
    if steps == 0:
        _log.warning("Training made no steps; is the input empty?")
    return loss


def train_model(
    plan: TFRunPlan,
    input_fn: InputFn,
    hooks: list[tf.compat.v1.train.SessionRunHook],
    saving_listeners: list[tf.compat.v1.train.CheckpointSaverListener],
) -> np.ndarray | None:
    """Build the TRAIN graph in a fresh ``tf.Graph`` (variables on the parameter servers
    when the cluster has some) and train; return the last loss."""
    with tf.Graph().as_default() as graph, graph.device(device_function(plan.config)):
        tf.compat.v1.random.set_random_seed(plan.config.tf_random_seed)
        global_step = plan.create_global_step(graph)
        if global_step is not None:
            training_util._get_or_create_global_step_read(graph)
        features, labels, input_hooks = plan.call_input_fn(input_fn)
        spec = plan.model_fn(features, labels)
        global_step = tf.compat.v1.train.get_global_step(graph)
        order_step_writes_after_read(graph)  # the step hooks' read is the step before the run
        return train_with_spec(plan, spec, input_hooks, hooks, global_step, saving_listeners)
