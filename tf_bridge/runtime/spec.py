"""EstimatorSpec, TPUEstimatorSpec and NPUEstimatorSpec for TensorFlow model_fns.

The same field sets and the same validation as jaxspec's specs, for TF values: ``loss``
and ``predictions`` are ``tf.Tensor``s, ``train_op`` a ``tf.Operation`` or ``tf.Tensor``,
hooks ``tf.compat.v1.train.SessionRunHook``s, ``scaffold`` a
``tf.compat.v1.train.Scaffold``, and export outputs TensorFlow's own ExportOutput
classes (those ``tf.estimator.export`` re-exported). The per-mode requirements, the mode
rules, the ``eval_metric_ops`` structure, the ``(fn, tensors)`` pairs of
``host_call``/``eval_metrics``, the constructors' signatures and ``_replace`` are
jaxspec's (``jaxspec.rules.spec_classes``, ``jaxspec.rules.spec_fields``); the value
checks below (``TFSpecValues``) are their TensorFlow counterparts, with the same
exception types (tf.estimator's) and messages that name the spec class and the field.
"""

from __future__ import annotations

from typing import TypeGuard

import tensorflow as tf
from tensorflow.python.saved_model.model_utils import export_output as _tf_export_output

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules import spec_fields
from jaxspec.rules.fn_tensors import call_with_tensors
from jaxspec.rules.spec_classes import (
    EstimatorSpecBase,
    NPUEstimatorSpecBase,
    SpecValues,
    TPUEstimatorSpecBase,
)
from jaxspec.rules.spec_fields import require_loss, require_train_op
from tf_bridge.runtime.host_call_order import order_before_update
from tf_bridge.runtime.runner_hooks import HostCallFetchHook

ExportOutput = _tf_export_output.ExportOutput
ClassificationOutput = _tf_export_output.ClassificationOutput
RegressionOutput = _tf_export_output.RegressionOutput
PredictOutput = _tf_export_output.PredictOutput

SERVING_DEFAULT = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY


def _type_name(x: object) -> str:
    return type(x).__name__


def is_dense_tensor(x: object) -> TypeGuard[tf.Tensor | tf.Variable]:
    """True for a dense ``tf.Tensor`` (graph or eager) or a ``tf.Variable``."""
    return isinstance(x, (tf.Tensor, tf.Variable))


def _check_graph(value: object, field: str, cls: str) -> None:
    """ValueError unless ``value`` lives in the default graph (tf.estimator's check: a
    tensor from an earlier model_fn call or another graph cannot run in this session)."""
    if tf.executing_eagerly():
        return
    graph = getattr(value, "graph", None)
    if graph is not None and graph is not tf.compat.v1.get_default_graph():
        raise ValueError(
            f"{cls}: {field} ({getattr(value, 'name', value)}) is not in the default graph; build "
            "every tensor of the spec inside this call of model_fn."
        )


class TFSpecValues(SpecValues):
    """The TensorFlow side's values: dense ``tf.Tensor``s of the default graph,
    ``tf.Operation``s, ``tf.compat.v1.train`` hooks and Scaffold, TensorFlow's
    ExportOutput classes, ``(value, update_op)`` metrics."""

    dense_of = (is_dense_tensor, "a dense tf.Tensor")
    hooks_of = (tf.compat.v1.train.SessionRunHook, "tf.compat.v1.train.SessionRunHook")
    scaffold_of = (tf.compat.v1.train.Scaffold, "tf.compat.v1.train.Scaffold")
    outputs_of = (
        ExportOutput,
        PredictOutput,
        "a TensorFlow ExportOutput (tf_bridge.ClassificationOutput/RegressionOutput/PredictOutput)",
    )

    def check_value(self, value: object, field: str, cls: str) -> None:
        """A prediction must come from the default graph (ValueError otherwise)."""
        _check_graph(value, field, cls)

    def train_op(self, train_op: object, mode: str | None, cls: str) -> tf.Operation | tf.Tensor | None:
        """``train_op``: a ``tf.Operation`` or tensor (a variable becomes its op).

        Raises:
          ValueError: missing in TRAIN, or not in the default graph.
          TypeError: neither an Operation nor a tensor.
        """
        if train_op is None:
            require_train_op(mode, cls)
            return None
        if not isinstance(train_op, (tf.Operation, tf.Tensor, tf.Variable)):
            raise TypeError(
                f"{cls}: train_op must be a tf.Operation or tf.Tensor, got {_type_name(train_op)}."
            )
        if isinstance(train_op, tf.Variable):
            train_op = train_op.op
        _check_graph(train_op, "train_op", cls)
        return train_op

    def loss(self, loss: object, mode: str | None, cls: str) -> tf.Tensor | None:
        """``loss``: a dense tensor with one element (any shape), returned with shape ``[]``.

        Raises:
          ValueError: missing in TRAIN/EVAL, more than one element, or not in the default graph.
          TypeError: not a dense tensor.
        """
        if loss is None:
            require_loss(mode, cls)
            return None
        if not is_dense_tensor(loss):
            raise TypeError(f"{cls}: loss must be a dense tf.Tensor, got {_type_name(loss)}.")
        elements = loss.shape.num_elements()
        if elements not in (None, 1):
            raise ValueError(f"{cls}: loss must be a scalar (one element), got shape {loss.shape}.")
        _check_graph(loss, "loss", cls)
        if not loss.shape.is_compatible_with(tf.TensorShape([])):
            loss = tf.reshape(loss, [])
        return loss

    def eval_metric_ops(self, ops: object, cls: str) -> dict[str, object]:
        """A dict of ``(value, update_op)`` tuples or graph-mode Keras metrics (objects with
        ``result()`` and ``updates``, e.g. ``tf_keras``), as tf.estimator. A Keras metric
        becomes ``(result(), updates[0])`` and its variables join the LOCAL_VARIABLES and
        METRIC_VARIABLES collections (so evaluation initialises them), as tf.estimator does.

        Raises:
          TypeError: not a dict, or a value of another kind (jaxspec's structure check).
          ValueError: a Keras metric with no update (``update_state`` never called), or a
            tensor, update or metric result not in the default graph.
        """
        ops = spec_fields.check_eval_metric_ops(ops, cls)
        new_vars: list[tf.Variable] = []
        for key, value in list(ops.items()):
            if isinstance(value, tuple):
                for part in tf.nest.flatten(value):
                    _check_graph(part, f"eval_metric_ops[{key!r}]", cls)
                continue
            updates = getattr(value, "updates", None)
            if not updates:
                raise ValueError(
                    f"{cls}: eval_metric_ops[{key!r}] is a metric object with no graph update; call "
                    "update_state(...) on it in model_fn (graph-mode Keras metrics, e.g. tf_keras), or use "
                    "tf.compat.v1.metrics."
                )
            for update in updates:  # a metric built in another graph cannot run in this one
                _check_graph(update, f"eval_metric_ops[{key!r}]", cls)
            result = value.result()
            _check_graph(result, f"eval_metric_ops[{key!r}]", cls)
            ops[key] = (result, updates[0])
            new_vars.extend(value.variables)
        for collection in (tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES):
            present = {id(v) for v in tf.compat.v1.get_collection(collection)}
            for var in new_vars:
                if id(var) not in present:
                    tf.compat.v1.add_to_collection(collection, var)
        return ops


class EstimatorSpec(EstimatorSpecBase):
    """What a TensorFlow model_fn returns (``tf.estimator.EstimatorSpec``).

    TRAIN needs ``loss`` and ``train_op``; EVAL needs ``loss``; PREDICT needs
    ``predictions``; ``mode=None`` skips these requirements, as tf.estimator.

    Args:
      mode: a ModeKeys value (``'train'``, ``'eval'``, ``'infer'``) or None.
      predictions: ``tf.Tensor`` ``[batch, ...]`` or dict of them (``{}`` when None
        outside PREDICT).
      loss: ``tf.Tensor`` with one element (``[]``, ``[1]``, ...), stored reshaped to ``[]``.
      train_op: ``tf.Operation`` or ``tf.Tensor`` (a ``tf.Variable`` becomes its op).
      eval_metric_ops: dict of name to ``(value, update_op)`` (``tf.compat.v1.metrics``)
        or a graph-mode Keras metric.
      export_outputs: dict of name to TF ExportOutput (PREDICT: defaulted and aliased to
        ``serving_default``).
      training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks: iterables
        of ``tf.compat.v1.train.SessionRunHook``, stored as tuples.
      scaffold: ``tf.compat.v1.train.Scaffold`` or None (a default one).

    Raises:
      ValueError: a required field is missing, loss has more than one element, a tensor is
        not from the default graph, several heads without ``serving_default``, an unknown
        mode.
      TypeError: a field has the wrong type (the message names the field and key).
    """

    __slots__ = ()
    values = TFSpecValues()


class NPUEstimatorSpec(NPUEstimatorSpecBase, EstimatorSpec):  # type: ignore[misc]  # one namedtuple, twice
    """An EstimatorSpec plus ``host_call`` (Ascend's ``NPUEstimatorSpec``).

    ``host_call`` is ``(host_fn, tensors)``, checked by jaxspec's
    ``validate_fn_tensors_pair`` (the adapter's rules and exception types; no rank rule).
    The NPUEstimator calls ``host_fn`` once, in the graph, on the tensors as they are
    after each step (TRAIN: after ``train_op``; EVAL: after ``loss``), and runs what it
    returns once per step, as the adapter's outfeed thread does; it is ignored in PREDICT.
    ``_replace`` keeps ``host_call`` (the adapter's loses it).

    Raises:
      As EstimatorSpec; and ValueError/TypeError/RuntimeError for a malformed host_call.
    """


class TPUEstimatorSpec(TPUEstimatorSpecBase):
    """What a TPUEstimator model_fn returns (``tf.estimator.tpu.TPUEstimatorSpec``).

    ``eval_metrics`` and ``host_call`` are ``(fn, tensors)`` pairs (tensors a list/tuple
    for ``fn(*tensors)`` or a dict for ``fn(**tensors)``), checked by jaxspec's
    ``validate_fn_tensors_pair``. tf_bridge runs TPUEstimator's CPU path, where
    ``as_estimator_spec()`` turns the spec into an EstimatorSpec.

    Args:
      mode, predictions, loss, train_op, export_outputs: as EstimatorSpec.
      eval_metrics: ``(metric_fn, tensors)``; metric_fn returns a dict of
        ``(value, update_op)`` (EVAL).
      scaffold_fn: ``() -> tf.compat.v1.train.Scaffold``.
      host_call: ``(host_fn, tensors)``; host_fn returns ops or tensors to run each step.
      training_hooks, evaluation_hooks, prediction_hooks: SessionRunHooks.

    Raises:
      ValueError / TypeError / RuntimeError: a malformed ``eval_metrics``/``host_call``
        (TPUEstimator's types); otherwise as EstimatorSpec.
      TypeError: ``scaffold_fn`` is not callable.
    """

    __slots__ = ()
    values = TFSpecValues()

    def as_estimator_spec(self) -> EstimatorSpec:
        """The EstimatorSpec TPUEstimator runs on CPU (``use_tpu=False``), as TF builds it:
        ``metric_fn`` and ``host_fn`` are called now, in the graph, on the tensors as they
        are (no concatenation, no rank rule; in TRAIN host_fn's tensors are read before
        ``train_op`` updates a variable, ``order_before_update``, so they are the step's
        own values, as TF 2.15's TPUEstimator(use_tpu=False) gave them in practice);
        ``eval_metric_ops`` is metric_fn's result;
        host_fn's result is fetched at every step by a ``HostCallFetchHook`` added to all
        three hook lists; the scaffold comes from ``scaffold_fn``.

        Raises:
          TypeError / ValueError: what metric_fn, host_fn or scaffold_fn raise, or what
            EstimatorSpec raises for their results.
        """
        eval_metric_ops = None
        if self.eval_metrics is not None:
            eval_metric_ops = call_with_tensors(*self.eval_metrics)
        hooks: tuple[tf.compat.v1.train.SessionRunHook, ...] = ()
        if self.host_call is not None:
            host_fn, tensors = self.host_call
            if self.mode == ModeKeys.TRAIN and self.train_op is not None and not tf.executing_eagerly():
                tensors = order_before_update(tensors, self.train_op)
            hooks = (HostCallFetchHook(call_with_tensors(host_fn, tensors)),)
        scaffold = self.scaffold_fn() if self.scaffold_fn is not None else None
        spec: EstimatorSpec = self._estimator_spec(EstimatorSpec, eval_metric_ops, scaffold, hooks)
        return spec


__all__ = [
    "ClassificationOutput",
    "EstimatorSpec",
    "ExportOutput",
    "ModeKeys",
    "NPUEstimatorSpec",
    "PredictOutput",
    "RegressionOutput",
    "TPUEstimatorSpec",
]
