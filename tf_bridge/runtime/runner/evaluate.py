"""``Estimator.evaluate`` for TensorFlow model_fns, as tf.estimator (2.15) runs it.

The metrics are model_fn's ``eval_metric_ops`` plus ``loss`` (``tf.compat.v1.metrics.mean``
of the per-batch loss); their update ops run once per batch, in one MonitoredSession
restored from the checkpoint, until the input ends or ``steps`` batches are done; the
values are read once at the end (FinalOpsHook), written to ``eval_dir`` as summaries and
returned with ``global_step``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TypeAlias

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from jaxspec.spec.fn_types import InputFn
from tf_bridge.runtime.runner.plan import TFRunPlan
from tf_bridge.runtime.runner_hooks import StopAfterNEvalsHook

_log = logging.getLogger("tf_bridge")

LOSS_METRIC_KEY = "loss"
GLOBAL_STEP_KEY = tf.compat.v1.GraphKeys.GLOBAL_STEP
# One of eval_metric_ops: TF's ``(value tensor, update op)`` pair.
MetricOp: TypeAlias = tuple[tf.Tensor, tf.Operation | tf.Tensor]


def get_or_create_eval_step() -> tf.Variable:
    """The int64 local variable counting evaluation batches (collection ``eval_step``)."""
    graph = tf.compat.v1.get_default_graph()
    existing = graph.get_collection(tf.compat.v1.GraphKeys.EVAL_STEP)
    if len(existing) == 1:
        return existing[0]
    if len(existing) > 1:
        raise ValueError("the graph has more than one eval_step variable.")
    return tf.compat.v1.get_variable(
        "eval_step",
        shape=[],
        dtype=tf.int64,
        initializer=tf.compat.v1.zeros_initializer(),
        trainable=False,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.EVAL_STEP],
    )


def metric_ops_with_loss(eval_metric_ops: dict[str, MetricOp], loss: tf.Tensor) -> dict[str, MetricOp]:
    """eval_metric_ops plus ``loss`` = mean of the per-batch loss.

    Raises:
      ValueError: eval_metric_ops already has a metric named ``loss``.
    """
    if LOSS_METRIC_KEY in eval_metric_ops:
        raise ValueError(
            f"eval_metric_ops may not have a metric named {LOSS_METRIC_KEY!r}: the Estimator reports the "
            "mean loss under that name."
        )
    ops = dict(eval_metric_ops)
    ops[LOSS_METRIC_KEY] = tf.compat.v1.metrics.mean(loss)
    return ops


def split_update_ops(metric_ops: dict[str, MetricOp]) -> tuple[tf.Operation | None, dict[str, tf.Tensor]]:
    """(one op running every update, dict of metric value tensors), in name order."""
    updates = []
    values = {}
    for name, (value, update) in sorted(metric_ops.items()):
        values[name] = value
        updates.append(update)
    return (tf.group(*updates) if updates else None), values


def build_eval_graph(
    plan: TFRunPlan,
    input_fn: InputFn,
    hooks: list[tf.compat.v1.train.SessionRunHook],
    checkpoint_path: str | None,
) -> tuple[
    tf.compat.v1.train.Scaffold,
    tf.Operation | None,
    dict[str, tf.Tensor],
    list[tf.compat.v1.train.SessionRunHook],
]:
    """Build the EVAL graph in the default graph: (scaffold, update op, value dict, hooks).

    Raises:
      ValueError: a metric named ``loss`` or ``global_step``.
    """
    graph = tf.compat.v1.get_default_graph()
    tf.compat.v1.random.set_random_seed(plan.config.tf_random_seed)
    plan.create_global_step(graph)
    features, labels, input_hooks = plan.call_input_fn(input_fn)
    spec = plan.model_fn(features, labels)
    update_op, values = split_update_ops(metric_ops_with_loss(spec.eval_metric_ops, spec.loss))
    plan.maybe_warm_start(restoring=bool(checkpoint_path))
    if GLOBAL_STEP_KEY in values:
        raise ValueError(
            f"eval_metric_ops may not have a metric named {GLOBAL_STEP_KEY!r}: the Estimator reports the "
            "global step under that name."
        )
    values[GLOBAL_STEP_KEY] = tf.compat.v1.train.get_global_step(graph)
    scaffold = spec.scaffold
    if scaffold.local_init_op is not None:
        get_or_create_eval_step()
        scaffold = tf.compat.v1.train.Scaffold(
            local_init_op=tf.group(
                scaffold.local_init_op, tf.compat.v1.train.Scaffold.default_local_init_op()
            ),
            copy_from_scaffold=scaffold,
        )
    all_hooks = list(input_hooks) + list(hooks) + list(spec.evaluation_hooks)
    return scaffold, update_op, values, all_hooks


def evaluate_once(
    plan: TFRunPlan,
    checkpoint_path: str | None,
    scaffold: tf.compat.v1.train.Scaffold,
    update_op: tf.Operation | None,
    values: dict[str, tf.Tensor],
    hooks: list[tf.compat.v1.train.SessionRunHook],
) -> dict[str, Any]:
    """Run the update op per batch until a hook stops or the input ends; return the
    metric values read once at the end."""
    eval_step = get_or_create_eval_step()
    hooks = list(hooks)
    if update_op is not None:
        increment = tf.compat.v1.assign_add(eval_step, 1, use_locking=True)
        run_ops = [update_op, increment]
        with tf.control_dependencies(run_ops):
            completed = tf.identity(eval_step.read_value())
        for hook in hooks:
            if isinstance(hook, StopAfterNEvalsHook):
                hook.set_evals_completed_tensor(completed)
    final = tf.compat.v1.train.FinalOpsHook(values)
    hooks.append(final)
    start = time.time()
    creator = tf.compat.v1.train.ChiefSessionCreator(
        scaffold=scaffold,
        checkpoint_filename_with_path=checkpoint_path,
        master=plan.config.evaluation_master or "",
        config=plan.session_config,
    )
    with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as session:
        if update_op is not None:
            while not session.should_stop():
                session.run(run_ops)
    _log.info("Evaluation took %.3f s.", time.time() - start)
    return final.final_ops_values


def _summary_value(summary: summary_pb2.Summary, key: str, value: object) -> None:
    """Add ``value`` to ``summary`` as tf.estimator did: floats and ints as simple values,
    numpy arrays as tensors, serialized Summary protos unpacked; others skipped."""
    if isinstance(value, (np.float32, float)):
        summary.value.add(tag=key, simple_value=float(value))
    elif isinstance(value, (np.int32, np.int64, int)):
        summary.value.add(tag=key, simple_value=int(value))
    elif isinstance(value, bytes):
        try:
            parsed = summary_pb2.Summary.FromString(value)
        except Exception:
            _log.warning("Summary for %r skipped: bytes that are not a Summary proto.", key)
            return
        for i, item in enumerate(parsed.value):
            item.tag = f"{key}/{i}"
        summary.value.extend(parsed.value)
    elif isinstance(value, np.ndarray):
        item = summary.value.add(tag=key, node_name=key)
        item.tensor.CopyFrom(tf.make_tensor_proto(value))
    else:
        _log.warning(
            "Summary for %r skipped: a %s is not a number, array or Summary.", key, type(value).__name__
        )


def write_dict_to_summary(output_dir: str, results: dict[str, Any], global_step: int) -> None:
    """Write evaluation results (all but ``global_step``) as one event at ``global_step``."""
    _log.info(
        "Saving dict for global step %d: %s",
        global_step,
        ", ".join(f"{k} = {v}" for k, v in sorted(results.items()) if not isinstance(v, bytes)),
    )
    summary = summary_pb2.Summary()
    for key, value in results.items():
        if value is not None and key != GLOBAL_STEP_KEY:
            _summary_value(summary, key, value)
    writer = tf.compat.v1.summary.FileWriterCache.get(output_dir)
    writer.add_summary(summary, global_step)
    writer.flush()


def write_checkpoint_path_summary(output_dir: str, checkpoint_path: str, global_step: int) -> None:
    """Record which checkpoint was evaluated (tag ``checkpoint_path``, a string tensor)."""
    summary = summary_pb2.Summary()
    summary.value.add(tag="checkpoint_path", tensor=tf.make_tensor_proto(checkpoint_path, dtype=tf.string))
    writer = tf.compat.v1.summary.FileWriterCache.get(output_dir)
    writer.add_summary(summary, global_step)
    writer.flush()


def run_evaluate(
    plan: TFRunPlan,
    input_fn: InputFn,
    hooks: list[tf.compat.v1.train.SessionRunHook],
    checkpoint_path: str | None,
    output_dir: str,
) -> dict[str, Any]:
    """Build, run and record one evaluation; return the results dict."""
    with tf.Graph().as_default():
        scaffold, update_op, values, all_hooks = build_eval_graph(plan, input_fn, hooks, checkpoint_path)
        results = evaluate_once(plan, checkpoint_path, scaffold, update_op, values, all_hooks)
        step = int(results[GLOBAL_STEP_KEY])
        write_dict_to_summary(output_dir, results, step)
        if checkpoint_path:
            write_checkpoint_path_summary(output_dir, checkpoint_path, step)
    return results
