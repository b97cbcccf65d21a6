"""RunConfig and TPUConfig for TensorFlow model_fns (``tf.estimator.RunConfig``,
``tf.estimator.tpu.RunConfig``, ``tf.estimator.tpu.TPUConfig``).

The fields, defaults and validation are jaxspec's (``jaxspec.config.run_config``), which follow
tf.estimator's; this module adds what a TensorFlow session needs: a default
``session_config`` (the one tf.estimator used), and the cluster properties tf.estimator
exposes, read from ``TF_CONFIG`` (``tf_bridge.runtime.cluster_settings``).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from jaxspec.config import run_config as _jaxspec_config
from tf_bridge.runtime import cluster_settings as _cluster_settings

InputPipelineConfig = _jaxspec_config.InputPipelineConfig


def default_session_config() -> tf.compat.v1.ConfigProto:
    """The ``tf.compat.v1.ConfigProto`` tf.estimator used when ``session_config`` is None:
    soft placement on, and Grappler's meta optimizer run once. Same settings as TF 2.15's
    Estimator, so graphs are rewritten (and computed) the same way."""
    options = rewriter_config_pb2.RewriterConfig(
        meta_optimizer_iterations=rewriter_config_pb2.RewriterConfig.ONE
    )
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True, graph_options=tf.compat.v1.GraphOptions(rewrite_options=options)
    )


class TPUConfig(_jaxspec_config.TPUConfig):
    """TPU loop and input settings (``tf.estimator.tpu.TPUConfig``).

    Same arguments, defaults and validation as ``jaxspec.TPUConfig``. tf_bridge runs
    TPUEstimator's CPU path (``use_tpu=False``): like TF on CPU, it runs one step per
    ``Session.run``, so ``iterations_per_loop`` and the input pipeline mode are stored
    but do not change what is computed.
    """


def _strategy_coordinated(train_distribute: object, experimental_distribute: object) -> bool:
    """Whether tf.estimator would hand the cluster to a strategy's coordinator: a
    ``train_distribute`` that is not a TPUStrategy (or one in ``experimental_distribute``)."""
    strategy = train_distribute or getattr(experimental_distribute, "train_distribute", None)
    return strategy is not None and not type(strategy).__name__.startswith("TPUStrategy")


def _check_strategies(train_distribute: object, eval_distribute: object) -> None:
    """tf.estimator's strategy rule: the TF2 ParameterServerStrategy does not run an
    Estimator (its TF1 ``tf.compat.v1.distribute.experimental`` one does).

    Raises:
      ValueError: either is a ``tf.distribute.experimental.ParameterServerStrategy``.
    """
    v2 = tf.distribute.experimental.ParameterServerStrategy
    for name, strategy in (("train_distribute", train_distribute), ("eval_distribute", eval_distribute)):
        if strategy is not None and type(strategy) is v2:
            raise ValueError(
                f"RunConfig: {name} is a TF2 ParameterServerStrategy; an Estimator needs "
                "tf.compat.v1.distribute.experimental.ParameterServerStrategy."
            )


def _check_session_config(session_config: object) -> None:
    if session_config is not None and not isinstance(session_config, tf.compat.v1.ConfigProto):
        raise ValueError(
            f"RunConfig: session_config must be a tf.compat.v1.ConfigProto, got {type(session_config).__name__}."
        )


def distributed_session_config(task_type: str, task_id: int) -> tf.compat.v1.ConfigProto | None:
    """tf.estimator's session_config for a task of a cluster when none is given: the
    default one plus the task's device filters (``cluster_settings.device_filters``); None for
    a task that gets none (an evaluator)."""
    filters = _cluster_settings.device_filters(task_type, task_id)
    if filters is None:
        return None
    config = default_session_config()
    config.device_filters.extend(filters)
    return config


class RunConfig(_jaxspec_config.RunConfig):
    """Where and how a TensorFlow model_fn runs (``tf.estimator.RunConfig``, and
    ``tf.estimator.tpu.RunConfig`` through ``tpu_config``).

    Arguments, defaults and validation are ``jaxspec.RunConfig``'s (tf.estimator's):
    ``save_summary_steps=100``, checkpoints every 600 s unless ``save_checkpoints_steps``
    or ``save_checkpoints_secs`` is given (ValueError for both), ``keep_checkpoint_max=5``,
    ``log_step_count_steps=100``. ``session_config`` None means
    ``default_session_config()`` when a session is made, as tf.estimator did.

    The cluster comes from the ``TF_CONFIG`` environment variable, read once here as
    tf.estimator reads it (``tf_bridge.runtime.cluster_settings``): ``cluster_spec``, ``task_type``,
    ``task_id``, ``is_chief``, ``master`` and ``evaluation_master`` (``''`` without a
    cluster), ``num_ps_replicas``, ``num_worker_replicas``, ``global_id_in_cluster``,
    ``service``; its ``model_dir`` is used when none is given; in a cluster, a task
    given no ``session_config`` gets the default one with the task's device filters.
    ``master``/``evaluation_master`` given as arguments (the TPU RunConfig's) win.

    Raises:
      ValueError: as ``jaxspec.RunConfig``; TF_CONFIG's cluster or task invalid (see
        ``cluster_settings.cluster_settings``), its model_dir empty or different from
        ``model_dir``; ``session_config`` not a ``tf.compat.v1.ConfigProto``; a TF2
        ParameterServerStrategy as ``train_distribute``/``eval_distribute``.
      TypeError: as ``jaxspec.RunConfig``; TF_CONFIG's ``service`` not a dict.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _check_strategies(self.train_distribute, self.eval_distribute)
        _check_session_config(self.session_config)
        tf_config = _cluster_settings.read_tf_config()
        coordinated = _strategy_coordinated(self.train_distribute, self.experimental_distribute)
        settings = _cluster_settings.cluster_settings(tf_config, coordinated)
        set_field = functools.partial(object.__setattr__, self)
        set_field("_model_dir", _cluster_settings.model_dir_from(tf_config, self.model_dir))
        set_field("_cluster_settings", settings)
        if self._master is None:
            set_field("_master", settings.master)
            if self._evaluation_master is None:
                set_field("_evaluation_master", settings.evaluation_master)
        # a strategy's coordinator owns a cluster without a master job: no device filters then
        coordinated = coordinated and "master" not in settings.cluster_spec.jobs
        if self.session_config is None and settings.cluster_spec.jobs and not coordinated:
            set_field("_session_config", distributed_session_config(settings.task_type, settings.task_id))

    def replace(self, **kwargs: Any) -> RunConfig:
        """As ``jaxspec.RunConfig.replace``; the cluster settings are kept (TF_CONFIG is
        not read again), as tf.estimator.

        Raises:
          ValueError / TypeError: as the constructor's field rules.
        """
        new = super().replace(**kwargs)
        _check_strategies(new.train_distribute, new.eval_distribute)
        _check_session_config(new.session_config)
        return new

    @property
    def is_chief(self) -> bool:
        """True for the ``chief`` (or ``master``) task, and without a cluster."""
        return self._cluster_settings.is_chief

    @property
    def num_worker_replicas(self) -> int:
        """Training tasks: workers plus the chief (1 without a cluster, 0 on an evaluator)."""
        return self._cluster_settings.num_worker_replicas

    @property
    def num_ps_replicas(self) -> int:
        """Parameter server tasks in the cluster."""
        return self._cluster_settings.num_ps_replicas

    @property
    def task_type(self) -> str:
        """TF_CONFIG's task type; ``'worker'`` without a cluster."""
        return self._cluster_settings.task_type

    @property
    def task_id(self) -> int:
        """TF_CONFIG's task index; 0 without a cluster."""
        return self._cluster_settings.task_id

    @property
    def global_id_in_cluster(self) -> int | None:
        """The task's index among all training tasks (chief first, then the other jobs by
        name, parameter servers last); None on an evaluator."""
        return self._cluster_settings.global_id_in_cluster

    @property
    def cluster_spec(self) -> tf.train.ClusterSpec:
        """The ``tf.train.ClusterSpec`` (empty without a cluster and on an evaluator)."""
        return self._cluster_settings.cluster_spec

    @property
    def service(self) -> dict[str, Any] | None:  # JSON, as TF_CONFIG gives it
        """TF_CONFIG's ``service`` dict, or None."""
        return self._cluster_settings.service

    @property
    def session_master(self) -> str:
        """The master training sessions connect to (``master``)."""
        return self.master

    def session_target(self) -> str:
        """The session target: ``master`` or ``''`` (in-process)."""
        return self.master or ""

    def resolved_session_config(self) -> tf.compat.v1.ConfigProto:
        """``session_config``, or ``default_session_config()`` when it is None."""
        return self.session_config if self.session_config is not None else default_session_config()


class TaskType:
    """The task types of a TF_CONFIG cluster (``tf.estimator``'s ``run_config.TaskType``)."""

    MASTER = _cluster_settings.MASTER
    PS = _cluster_settings.PS
    WORKER = _cluster_settings.WORKER
    CHIEF = _cluster_settings.CHIEF
    EVALUATOR = _cluster_settings.EVALUATOR


__all__ = [
    "InputPipelineConfig",
    "RunConfig",
    "TPUConfig",
    "TaskType",
    "default_session_config",
    "distributed_session_config",
]
