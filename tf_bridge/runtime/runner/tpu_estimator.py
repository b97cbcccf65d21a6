"""``tf_bridge.TPUEstimator``: TPUEstimator's CPU path (``use_tpu=False``) on TF >= 2.16.

TensorFlow >= 2.16 has no TPUEstimator and tf_bridge has no TPU runtime: this class runs
what TF 2.15's TPUEstimator ran with ``use_tpu=False``. For a TPU (or a mesh of GPUs),
port the model_fn to ``jaxspec.TPUEstimator``, which runs it per replica.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.numbers import check_positive_int
from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator, WarmStartFrom
from tf_bridge.runtime.runner.inputs import call_model_fn, fn_arg_names
from tf_bridge.runtime.runner.v1_forms import V1Methods
from tf_bridge.runtime.runner_hooks import ExamplesPerSecondHook
from tf_bridge.runtime.spec import EstimatorSpec, TPUEstimatorSpec

_log = logging.getLogger("tf_bridge")

BATCH_SIZE_KEY = "batch_size"
CONTEXT_KEY = "context"
USE_TPU_KEY = "use_tpu"
RESERVED_PARAMS_KEYS = (BATCH_SIZE_KEY, CONTEXT_KEY)


def check_positive_integer(value: object, name: str) -> None:
    """TypeError unless an int (bool excluded); ValueError unless > 0 (TPUEstimator's
    checks; ``jaxspec.rules.numbers.check_positive_int``)."""
    check_positive_int(value, name, allow_bool=False)


def check_no_cross_replica_ops(graph: tf.Graph) -> None:
    """TF 2.15's TPUEstimator CPU path failed at the first step on a ``CrossReplicaSum``
    (what ``tf.compat.v1.tpu.CrossShardOptimizer`` adds): no CPU kernel. Say so when the
    graph is built, with the same exception type.

    Raises:
      tf.errors.InvalidArgumentError: the graph has a CrossReplicaSum op.
    """
    for op in graph.get_operations():
        if op.type == "CrossReplicaSum":
            raise tf.errors.InvalidArgumentError(
                op.node_def,
                op,
                f"model_fn built {op.name!r} (a CrossReplicaSum, e.g. from tf.compat.v1.tpu.CrossShardOptimizer), "
                "which only a TPU runs; tf_bridge runs TPUEstimator's CPU path, where params['use_tpu'] is False. "
                "Wrap the optimizer only when params['use_tpu'] is True (as on TF 2.15's CPU path), or port the "
                "model_fn to jaxspec.TPUEstimator, whose CrossShardOptimizer averages over a device mesh.",
            )


class TPUEstimator(V1Methods, Estimator):
    """``tf.estimator.tpu.TPUEstimator``, CPU path (TF 2.15's ``use_tpu=False``).

    model_fn returns a ``tf_bridge.TPUEstimatorSpec`` (or an EstimatorSpec) and must take
    ``params``; ``params['batch_size']`` is the global batch size of the mode (train /
    eval / predict, when given) for input_fn and model_fn, and ``params['use_tpu']`` is
    False for model_fn. A TPUEstimatorSpec runs as ``as_estimator_spec()``: metric_fn's
    metrics, host_fn's ops run once per step (tensors as they are: no concatenation),
    the scaffold from scaffold_fn. One step per ``Session.run``; ``iterations_per_loop``
    only sets how often ``global_step/sec`` and ``examples/sec`` are logged
    (``log_step_count_steps / iterations_per_loop`` steps, as TF). ``export_saved_model``
    writes the CPU metagraph only (TF's TPU metagraph needs a TPU).

    Args:
      model_fn, model_dir, params, warm_start_from: as Estimator (params may not hold
        ``batch_size`` or ``context``).
      config: a ``tf_bridge.RunConfig`` (its ``tpu_config``); required.
      use_tpu: TF's default True is accepted: tf_bridge has no TPU, so it warns and runs
        the CPU path (the batch sizes are then checked as TF checks them).
      train_batch_size, eval_batch_size, predict_batch_size: global batch sizes.
      batch_axis, eval_on_tpu, export_to_tpu, export_to_cpu, embedding_config_spec,
      export_saved_model_api_version: accepted for compatibility; no effect on CPU.

    Raises:
      ValueError: no RunConfig, reserved params keys, use_tpu without train_batch_size,
        export_to_cpu False (no TPU metagraph either), or as Estimator.
      TypeError: a batch size that is not an int.
    """

    _spec_types = (TPUEstimatorSpec, EstimatorSpec)
    _skip_predict_input_check = True

    def __init__(
        self,
        model_fn: Callable[..., TPUEstimatorSpec | EstimatorSpec] | None = None,
        model_dir: str | os.PathLike[str] | None = None,
        config: RunConfig | None = None,
        params: dict[str, Any] | None = None,
        use_tpu: bool = True,
        train_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        predict_batch_size: int | None = None,
        batch_axis: object = None,
        eval_on_tpu: bool = True,
        export_to_tpu: bool = True,
        export_to_cpu: bool = True,
        warm_start_from: WarmStartFrom = None,
        embedding_config_spec: object = None,
        export_saved_model_api_version: object = 1,
    ) -> None:
        if config is None or not isinstance(config, RunConfig):
            raise ValueError("TPUEstimator needs config, a tf_bridge.RunConfig (with its tpu_config).")
        if params is not None and any(k in params for k in RESERVED_PARAMS_KEYS):
            raise ValueError(f"params may not hold the keys {RESERVED_PARAMS_KEYS}: TPUEstimator sets them.")
        if use_tpu:
            _log.warning(
                "TPUEstimator(use_tpu=True): tf_bridge has no TPU; running the CPU path (use_tpu=False)."
            )
            if train_batch_size is None:
                raise ValueError("TPUEstimator(use_tpu=True) needs train_batch_size.")
            check_positive_integer(train_batch_size, "train_batch_size")
            for name, value in (
                ("eval_batch_size", eval_batch_size),
                ("predict_batch_size", predict_batch_size),
            ):
                if value is not None:
                    check_positive_integer(value, name)
        if not export_to_cpu:
            raise ValueError(
                "export_to_cpu=False leaves nothing to export: tf_bridge writes no TPU metagraph."
            )
        if embedding_config_spec is not None:
            raise NotImplementedError("TPU embeddings (embedding_config_spec) need a TPU.")
        ipl = config.tpu_config.iterations_per_loop
        log_steps = config.log_step_count_steps
        self._log_every_n_steps = None if log_steps is None else int(math.ceil(log_steps / ipl))
        self._batch_sizes = {
            ModeKeys.TRAIN: train_batch_size,
            ModeKeys.EVAL: eval_batch_size,
            ModeKeys.PREDICT: predict_batch_size,
        }
        super().__init__(
            model_fn=model_fn,
            model_dir=model_dir,
            config=config.replace(log_step_count_steps=None),
            params=params,
            warm_start_from=warm_start_from,
        )

    def _create_global_step(self, graph: tf.Graph) -> tf.Variable:
        """A resource int64 ``global_step`` (TPUEstimator's own creation).

        Raises:
          ValueError: the graph already has a global step.
        """
        if tf.compat.v1.train.get_global_step(graph) is not None:
            raise ValueError("the graph already has a global_step.")
        with graph.as_default(), graph.name_scope(None):
            return tf.compat.v1.get_variable(
                tf.compat.v1.GraphKeys.GLOBAL_STEP,
                shape=[],
                dtype=tf.int64,
                initializer=tf.compat.v1.zeros_initializer(),
                trainable=False,
                use_resource=True,
                collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.GLOBAL_STEP],
            )

    def _input_fn_params(self, mode: str) -> dict[str, Any]:
        params = self.params
        if self._batch_sizes[mode] is not None:
            params[BATCH_SIZE_KEY] = self._batch_sizes[mode]
        return params

    def _check_input_fn(self, input_fn: InputFn) -> None:
        if "params" not in fn_arg_names(input_fn):
            raise ValueError(
                "input_fn must take params: TPUEstimator passes the batch size as params['batch_size']."
            )

    def train(
        self,
        input_fn: InputFn,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        steps: int | None = None,
        max_steps: int | None = None,
        saving_listeners: Iterable[tf.compat.v1.train.CheckpointSaverListener] | None = None,
    ) -> TPUEstimator:
        """As ``Estimator.train``; input_fn must take ``params``.

        Raises:
          ValueError: input_fn takes no params; as Estimator.train.
        """
        self._check_input_fn(input_fn)
        super().train(
            input_fn, hooks=hooks, steps=steps, max_steps=max_steps, saving_listeners=saving_listeners
        )
        return self

    def evaluate(
        self,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        checkpoint_path: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """As ``Estimator.evaluate``; input_fn must take ``params``.

        Raises:
          ValueError: input_fn takes no params; as Estimator.evaluate.
        """
        self._check_input_fn(input_fn)
        return super().evaluate(
            input_fn, steps=steps, hooks=hooks, checkpoint_path=checkpoint_path, name=name
        )

    def predict(
        self,
        input_fn: InputFn,
        predict_keys: str | Sequence[str] | None = None,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        checkpoint_path: str | None = None,
        yield_single_examples: bool = True,
    ) -> Iterator[Any]:
        """As ``Estimator.predict``; input_fn must take ``params`` (checked at the first next)."""
        self._check_input_fn(input_fn)
        yield from super().predict(
            input_fn,
            predict_keys=predict_keys,
            hooks=hooks,
            checkpoint_path=checkpoint_path,
            yield_single_examples=yield_single_examples,
        )

    def _call_model_fn(
        self, features: PyTree, labels: PyTree, mode: str, config: RunConfig, export: bool = False
    ) -> EstimatorSpec:
        """model_fn with TPUEstimator's params, its TPUEstimatorSpec as_estimator_spec(),
        and ExamplesPerSecondHook in TRAIN.

        Raises:
          ValueError: model_fn takes no params, or returns neither spec type.
        """
        if "params" not in fn_arg_names(self._model_fn):
            raise ValueError(
                "model_fn must take params: TPUEstimator passes the batch size as params['batch_size']."
            )
        params = copy.deepcopy(self._params)
        batch_size = None if export else self._batch_sizes[mode]
        if batch_size is not None:
            params[BATCH_SIZE_KEY] = batch_size
        params[USE_TPU_KEY] = False
        spec = call_model_fn(self._model_fn, features, labels, mode, params, config, self._spec_types)
        check_no_cross_replica_ops(tf.compat.v1.get_default_graph())
        if isinstance(spec, TPUEstimatorSpec):
            spec = spec.as_estimator_spec()
        if mode == ModeKeys.TRAIN and self._log_every_n_steps is not None:
            summaries = self._config.save_summary_steps
            hook = ExamplesPerSecondHook(
                self._batch_sizes[ModeKeys.TRAIN] or 0,
                every_n_steps=self._log_every_n_steps,
                output_dir=self.model_dir if summaries else None,
            )
            spec = spec._replace(training_hooks=spec.training_hooks + (hook,))
        return spec
