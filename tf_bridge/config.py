"""RunConfig and TPUConfig for TensorFlow model_fns (``tf.estimator.RunConfig``,
``tf.estimator.tpu.RunConfig``, ``tf.estimator.tpu.TPUConfig``).

The fields, defaults and validation are jaxspec's (``jaxspec.config``), which follow
tf.estimator's; this module adds what a TensorFlow session needs: a default
``session_config`` (the one tf.estimator used), and the cluster properties tf.estimator
exposes, for the single process tf_bridge runs in.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from jaxspec import config as _jaxspec_config

InputPipelineConfig = _jaxspec_config.InputPipelineConfig


def default_session_config() -> Any:
    """The ``tf.compat.v1.ConfigProto`` tf.estimator used when ``session_config`` is None:
    soft placement on, and Grappler's meta optimizer run once. Same settings as TF 2.15's
    Estimator, so graphs are rewritten (and computed) the same way."""
    options = rewriter_config_pb2.RewriterConfig(
        meta_optimizer_iterations=rewriter_config_pb2.RewriterConfig.ONE
    )
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True, graph_options=tf.compat.v1.GraphOptions(rewrite_options=options)
    )


def check_single_process() -> None:
    """tf_bridge runs one TensorFlow process; a ``TF_CONFIG`` naming a cluster is refused.

    Raises:
      NotImplementedError: ``TF_CONFIG`` has a non-empty ``cluster``.
    """
    raw = os.environ.get("TF_CONFIG", "")
    cluster = json.loads(raw).get("cluster") if raw.strip() else None
    if cluster:
        raise NotImplementedError(
            "TF_CONFIG names a cluster; tf_bridge runs model_fns in one process only "
            "(use jaxspec's multi-process mesh, or TF's own distribution strategies)."
        )


class TPUConfig(_jaxspec_config.TPUConfig):
    """TPU loop and input settings (``tf.estimator.tpu.TPUConfig``).

    Same arguments, defaults and validation as ``jaxspec.TPUConfig``. tf_bridge runs
    TPUEstimator's CPU path (``use_tpu=False``): like TF on CPU, it runs one step per
    ``Session.run``, so ``iterations_per_loop`` and the input pipeline mode are stored
    but do not change what is computed.
    """


class RunConfig(_jaxspec_config.RunConfig):
    """Where and how a TensorFlow model_fn runs (``tf.estimator.RunConfig``, and
    ``tf.estimator.tpu.RunConfig`` through ``tpu_config``).

    Arguments, defaults and validation are ``jaxspec.RunConfig``'s (tf.estimator's):
    ``save_summary_steps=100``, checkpoints every 600 s unless ``save_checkpoints_steps``
    or ``save_checkpoints_secs`` is given (ValueError for both), ``keep_checkpoint_max=5``,
    ``log_step_count_steps=100``. ``session_config`` None means
    ``default_session_config()`` when a session is made, as tf.estimator did.

    The cluster properties are those of TF's single-process RunConfig: chief, one worker,
    no parameter servers, ``master=''``.

    Raises:
      ValueError / TypeError: as ``jaxspec.RunConfig``.
    """

    @property
    def is_chief(self) -> bool:
        """Always True: tf_bridge runs in one process."""
        return True

    @property
    def num_worker_replicas(self) -> int:
        """1 (one process)."""
        return 1

    @property
    def num_ps_replicas(self) -> int:
        """0 (no parameter servers)."""
        return 0

    @property
    def task_type(self) -> str:
        """``'worker'``, TF's task type for a process without TF_CONFIG."""
        return "worker"

    @property
    def task_id(self) -> int:
        """0."""
        return 0

    @property
    def global_id_in_cluster(self) -> int:
        """0."""
        return 0

    @property
    def cluster_spec(self) -> Any:
        """An empty ``tf.train.ClusterSpec``."""
        return tf.train.ClusterSpec({})

    def session_target(self) -> str:
        """The session target: ``master`` or ``''`` (in-process)."""
        return self.master or ""

    def resolved_session_config(self) -> Any:
        """``session_config``, or ``default_session_config()`` when it is None."""
        return self.session_config if self.session_config is not None else default_session_config()


__all__ = ["InputPipelineConfig", "RunConfig", "TPUConfig", "check_single_process", "default_session_config"]
