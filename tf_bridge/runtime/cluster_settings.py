"""The ``TF_CONFIG`` environment variable, read as ``tf.estimator.RunConfig`` reads it.

``TF_CONFIG`` is JSON: ``cluster`` (job name -> list of ``host:port``), ``task``
(``type`` and ``index`` of this process), and optionally ``model_dir``, ``service``,
``session_master`` and ``eval_session_master``. ``cluster_settings`` turns it into the
values RunConfig exposes (task type and index, chief or not, master addresses, replica
counts, global id) with tf.estimator's validation, for the two cluster layouts it
accepted: one ``chief`` (the current one), or one ``master`` (the legacy one).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import tensorflow as tf

CHIEF, MASTER, WORKER, PS, EVALUATOR = "chief", "master", "worker", "ps", "evaluator"


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """What RunConfig exposes about the process's place in the cluster."""

    cluster_spec: tf.train.ClusterSpec
    task_type: str
    task_id: int
    is_chief: bool
    master: str
    evaluation_master: str
    num_ps_replicas: int
    num_worker_replicas: int
    global_id_in_cluster: int | None
    service: dict[str, Any] | None


def read_tf_config() -> dict[str, Any]:
    """``TF_CONFIG`` as a dict ({} when unset or empty).

    Raises:
      ValueError: it is not valid JSON.
    """
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def model_dir_from(tf_config: dict[str, Any], model_dir: str | None) -> str | None:
    """RunConfig's model_dir given TF_CONFIG's: they must agree when both are set.

    Raises:
      ValueError: an empty model_dir in either place, or two different ones.
    """
    if model_dir == "":
        raise ValueError("RunConfig: model_dir must be non-empty.")
    from_env = tf_config.get("model_dir")
    if from_env == "":
        raise ValueError("TF_CONFIG: model_dir must be non-empty.")
    if from_env and model_dir and from_env != model_dir:
        raise ValueError(
            f"RunConfig: model_dir {model_dir!r} differs from TF_CONFIG's model_dir {from_env!r}."
        )
    return model_dir or from_env


def _task(cluster: tf.train.ClusterSpec, task_env: dict[str, Any], chief_type: str) -> tuple[str, int]:
    """The validated task type and index.

    Raises:
      ValueError: no or several ``chief_type`` tasks, task type or index missing, a
        negative index, a task type not in the cluster (``evaluator`` excepted), an
        index past that job's tasks.
    """
    if chief_type not in cluster.jobs:
        raise ValueError(
            f"TF_CONFIG: a cluster needs one {chief_type!r} task; a cluster of workers only (worker 0 "
            "leading) needs a RunConfig(train_distribute=...) strategy, as in tf.estimator."
        )
    if len(cluster.job_tasks(chief_type)) > 1:
        raise ValueError(f"TF_CONFIG: a cluster may have only one {chief_type!r} task.")
    task_type, task_id = task_env.get("type"), task_env.get("index")
    if not task_type:
        raise ValueError("TF_CONFIG: with a cluster, task.type is required.")
    if task_id is None:
        raise ValueError("TF_CONFIG: with a cluster, task.index is required.")
    task_id = int(task_id)
    if task_id < 0:
        raise ValueError(f"TF_CONFIG: task.index must be >= 0, got {task_id}.")
    if task_type == EVALUATOR:
        return task_type, task_id
    if task_type not in cluster.jobs:
        raise ValueError(f"TF_CONFIG: task.type {task_type!r} is not a job of the cluster {cluster.jobs}.")
    if task_id >= len(cluster.job_tasks(task_type)):
        raise ValueError(
            f"TF_CONFIG: task.index {task_id} is out of range for the "
            f"{len(cluster.job_tasks(task_type))} {task_type!r} tasks."
        )
    return task_type, task_id


def _master(cluster: tf.train.ClusterSpec, task_type: str, task_id: int, tf_config: dict[str, Any]) -> str:
    """``session_master`` if given; '' for a one-task cluster; else this task's grpc address."""
    if "session_master" in tf_config:
        return tf_config["session_master"]
    jobs = cluster.jobs
    if len(jobs) == 1 and len(cluster.job_tasks(jobs[0])) == 1:
        return ""
    return "grpc://" + cluster.job_tasks(task_type)[task_id]


def _global_id(cluster: tf.train.ClusterSpec, task_type: str, task_id: int, chief_type: str) -> int:
    """Chief first, then the other jobs in name order, parameter servers last."""
    order = [chief_type] + [j for j in sorted(cluster.jobs) if j not in (chief_type, PS)]
    if PS in cluster.jobs:
        order.append(PS)
    offset = 0
    for job in order:
        if job == task_type:
            return offset + task_id
        offset += len(cluster.job_tasks(job))
    raise ValueError(f"TF_CONFIG: task.type {task_type!r} is not in the cluster.")


def _counts(cluster: tf.train.ClusterSpec, chief_type: str) -> tuple[int, int]:
    jobs = cluster.as_dict()
    return len(jobs.get(PS, [])), len(jobs.get(WORKER, [])) + len(jobs.get(chief_type, []))


def cluster_settings(tf_config: dict[str, Any], coordinated: bool = False) -> ClusterSettings:
    """The cluster settings ``tf_config`` describes (no cluster: one chief worker).

    ``coordinated``: the RunConfig has a ``train_distribute`` strategy (not a TPU one).
    Then, as in tf.estimator, a cluster without a ``master`` job (workers only, the layout
    of MultiWorkerMirroredStrategy, included) is kept as ``cluster_spec`` and every other
    setting is a local one (task ``worker`` 0, chief, master ``''``): the strategy's
    coordinator decides each task's role when it trains.

    Raises:
      TypeError: ``service`` is not a dict.
      ValueError: tf.estimator's validation of the cluster and task (see ``_task``);
        without a cluster, a task type other than ``worker`` or an index other than 0;
        with a ``master`` job, a ``chief`` job or an ``evaluator`` task too.
    """
    service = tf_config.get("service")
    if service is not None and not isinstance(service, dict):
        raise TypeError(f"TF_CONFIG: service must be a dict, got {type(service).__name__}.")
    cluster = tf.train.ClusterSpec(tf_config.get("cluster", {}))
    task_env = tf_config.get("task", {})
    eval_master = tf_config.get("eval_session_master", "")
    if coordinated and cluster.jobs and MASTER not in cluster.jobs:
        local = cluster_settings({})
        return dataclasses.replace(local, cluster_spec=cluster)
    if not cluster.jobs:
        task_type, task_id = task_env.get("type", WORKER), int(task_env.get("index", 0))
        if task_type != WORKER:
            raise ValueError(
                f"TF_CONFIG: without a cluster the task type must be 'worker', got {task_type!r}."
            )
        if task_id != 0:
            raise ValueError(f"TF_CONFIG: without a cluster the task index must be 0, got {task_id}.")
        master = tf_config.get("session_master", "")
        return ClusterSettings(cluster, WORKER, 0, True, master, eval_master, 0, 1, 0, service)
    chief_type = MASTER if MASTER in cluster.jobs else CHIEF
    if chief_type == MASTER and CHIEF in cluster.jobs:
        raise ValueError("TF_CONFIG: a cluster with a 'master' job may not have a 'chief' job.")
    task_type, task_id = _task(cluster, task_env, chief_type)
    if task_type == EVALUATOR:
        if chief_type == MASTER:
            raise ValueError("TF_CONFIG: a cluster with a 'master' job has no 'evaluator' task.")
        empty = tf.train.ClusterSpec({})
        return ClusterSettings(empty, task_type, task_id, False, "", eval_master, 0, 0, None, service)
    num_ps, num_workers = _counts(cluster, chief_type)
    return ClusterSettings(
        cluster_spec=cluster,
        task_type=task_type,
        task_id=task_id,
        is_chief=task_type == chief_type,
        master=_master(cluster, task_type, task_id, tf_config),
        evaluation_master="",
        num_ps_replicas=num_ps,
        num_worker_replicas=num_workers,
        global_id_in_cluster=_global_id(cluster, task_type, task_id, chief_type),
        service=service,
    )


def device_filters(task_type: str, task_id: int) -> list[str] | None:
    """The devices a task's sessions see in between-graph training: the parameter
    servers and the task itself (parameter servers see every trainer); None for other
    tasks (an evaluator)."""
    return {
        MASTER: ["/job:ps", "/job:master"],
        CHIEF: ["/job:ps", "/job:chief"],
        WORKER: ["/job:ps", f"/job:worker/task:{task_id}"],
        PS: ["/job:ps", "/job:worker", "/job:chief", "/job:master"],
    }.get(task_type)
