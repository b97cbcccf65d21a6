"""A training task's place in a TF_CONFIG cluster, as tf.estimator used it: the device
function of between-graph replication (variables on the parameter servers, ops on the
task) and the task's ``tf.distribute.Server``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import tensorflow as tf
from tensorflow.python.training import device_setter, server_lib

if TYPE_CHECKING:
    from tf_bridge.runtime.run_config import RunConfig

_log = logging.getLogger("tf_bridge")

TRAINER_JOBS = ("chief", "master", "worker")


def device_function(config: RunConfig) -> Callable[[tf.Operation], str] | None:
    """``config.device_fn``, else with parameter servers in the cluster a
    ``tf.compat.v1.train.replica_device_setter`` placing variables round-robin on the
    ``ps`` tasks and the other ops on this task; else None (no placement)."""
    if config.device_fn is not None:
        return config.device_fn
    if config.num_ps_replicas <= 0:
        return None
    worker = f"/job:{config.task_type}/task:{config.task_id}" if config.task_type else "/job:worker"
    return tf.compat.v1.train.replica_device_setter(
        ps_tasks=config.num_ps_replicas,
        worker_device=worker,
        merge_devices=True,
        ps_ops=list(device_setter.STANDARD_PS_OPS),
        cluster=config.cluster_spec,
    )


def start_server(config: RunConfig) -> tf.distribute.Server | None:
    """Start this task's ``tf.distribute.Server`` (None for a one-task cluster, which
    needs none).

    Raises:
      RuntimeError: no cluster, task type or index; no master in a cluster of several
        tasks.
    """
    cluster = config.cluster_spec
    if not cluster.jobs or not config.task_type or config.task_id is None:
        raise RuntimeError("starting a server needs a cluster, a task type and a task index (TF_CONFIG).")
    if not config.master:
        jobs = cluster.jobs
        if len(jobs) == 1 and len(cluster.job_tasks(jobs[0])) == 1 and config.task_type in TRAINER_JOBS:
            _log.info("One task in the cluster: no server started.")
            return None
        raise RuntimeError("starting a server needs RunConfig.master (TF_CONFIG's cluster gives it).")
    session = tf.compat.v1.ConfigProto(log_device_placement=False)
    if config.session_config is not None:
        session.gpu_options.CopyFrom(config.session_config.gpu_options)
    server = server_lib.Server(  # tf.distribute.Server, named where tf.estimator named it
        cluster,
        job_name=config.task_type,
        task_index=config.task_id,
        config=session,
        start=False,
        protocol=config.protocol,
    )
    server.start()
    _log.info("Started the server of %s:%d at %s.", config.task_type, config.task_id, server.target)
    return server
