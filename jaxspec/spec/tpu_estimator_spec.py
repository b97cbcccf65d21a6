"""TPUEstimatorSpec (``tf.estimator.tpu.TPUEstimatorSpec``)."""

from __future__ import annotations

import collections
from typing import Any

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.estimator_spec import (
    EstimatorSpec,
    check_export_outputs,
    check_hooks,
    check_loss,
    check_mode,
    check_predictions,
    check_train_op,
)
from jaxspec.spec.host_call import HostCallHook, call_with_tensors, validate_fn_tensors_pair
from jaxspec.spec.scaffold import Scaffold

_FIELDS = [
    "mode",
    "predictions",
    "loss",
    "train_op",
    "eval_metrics",
    "export_outputs",
    "scaffold_fn",
    "host_call",
    "training_hooks",
    "evaluation_hooks",
    "prediction_hooks",
]


class TPUEstimatorSpec(collections.namedtuple("TPUEstimatorSpec", _FIELDS)):
    """What a TPUEstimator model_fn returns, as ``tf.estimator.tpu.TPUEstimatorSpec``.

    On the mesh (``use_tpu=True``) model_fn runs once per replica. ``eval_metrics`` and
    ``host_call`` are ``(fn, tensors)`` pairs: each tensor is gathered from all replicas
    (concatenated on axis 0, replica 0 first, so each needs rank >= 1) and ``fn`` is
    called with them, ``*tensors`` for a list/tuple and ``**tensors`` for a dict.
    ``metric_fn`` returns a dict of metric states and runs inside the compiled eval step;
    ``host_fn`` runs on the host once per step, in step order, with numpy arrays (its
    return value is ignored). JAX difference: ``train_op`` is the new state pytree, and
    ``scaffold_fn`` returns a ``jaxspec.Scaffold``.

    Args:
      mode: a ModeKeys value.
      predictions: array ``[batch, ...]`` or dict of arrays (required in PREDICT).
      loss: float scalar or shape ``[1]`` (required in TRAIN and EVAL).
      train_op: the new state pytree (required in TRAIN).
      eval_metrics: ``(metric_fn, tensors)``.
      export_outputs: dict of str to ExportOutput (PREDICT).
      scaffold_fn: ``() -> Scaffold``.
      host_call: ``(host_fn, tensors)``.
      training_hooks, evaluation_hooks, prediction_hooks: SessionRunHooks.

    Raises:
      ValueError / TypeError / RuntimeError: as TPUEstimator for a malformed
        ``eval_metrics``/``host_call`` (see ``validate_fn_tensors_pair``); as
        EstimatorSpec for a missing or malformed loss, train_op or predictions.
    """

    def __new__(
        cls,
        mode: str,
        predictions: Any = None,
        loss: Any = None,
        train_op: Any = None,
        eval_metrics: Any = None,
        export_outputs: Any = None,
        scaffold_fn: Any = None,
        host_call: Any = None,
        training_hooks: Any = None,
        evaluation_hooks: Any = None,
        prediction_hooks: Any = None,
    ) -> TPUEstimatorSpec:
        name = cls.__name__
        mode = check_mode(mode)
        if eval_metrics is not None:
            eval_metrics = validate_fn_tensors_pair(eval_metrics, "eval_metrics", name)
        if host_call is not None:
            host_call = validate_fn_tensors_pair(host_call, "host_call", name)
        if scaffold_fn is not None and not callable(scaffold_fn):
            raise TypeError(f"{name}: scaffold_fn must be callable, got {type(scaffold_fn).__name__}.")
        predictions = check_predictions(predictions, mode, name)
        if mode == ModeKeys.PREDICT:
            export_outputs = check_export_outputs(export_outputs, predictions, name)
        return super().__new__(
            cls,
            mode=mode,
            predictions=predictions,
            loss=check_loss(loss, mode, name),
            train_op=check_train_op(train_op, mode, name),
            eval_metrics=eval_metrics,
            export_outputs=export_outputs,
            scaffold_fn=scaffold_fn,
            host_call=host_call,
            training_hooks=check_hooks(training_hooks, "training_hooks", name),
            evaluation_hooks=check_hooks(evaluation_hooks, "evaluation_hooks", name),
            prediction_hooks=check_hooks(prediction_hooks, "prediction_hooks", name),
        )

    def _replace(self, **kwds: Any) -> TPUEstimatorSpec:
        """Return a copy with fields replaced; re-validated; ``mode`` cannot change."""
        if "mode" in kwds and kwds["mode"] != self.mode:
            raise ValueError(f"{type(self).__name__}: mode is fixed once the spec is built.")
        fields = self._asdict()
        fields.update(kwds)
        return type(self)(**fields)

    def scaffold(self) -> Scaffold:
        """Call ``scaffold_fn`` (a default Scaffold when there is none).

        Raises:
          ValueError: scaffold_fn returned None.
          TypeError: scaffold_fn returned something other than a Scaffold.
        """
        if self.scaffold_fn is None:
            return Scaffold()
        scaffold = self.scaffold_fn()
        if scaffold is None:
            raise ValueError(f"{type(self).__name__}: scaffold_fn returned None; it must return a Scaffold.")
        if not isinstance(scaffold, Scaffold):
            raise TypeError(f"{type(self).__name__}: scaffold_fn must return a Scaffold, got {type(scaffold).__name__}.")
        return scaffold

    def as_estimator_spec(self) -> EstimatorSpec:
        """The EstimatorSpec TPUEstimator uses off the mesh (``use_tpu=False``).

        ``eval_metric_ops`` is ``metric_fn(*tensors)``; ``host_call`` becomes a hook that
        calls ``host_fn`` once per step on the host; the scaffold comes from scaffold_fn.
        """
        eval_metric_ops = None
        if self.eval_metrics is not None and self.mode == ModeKeys.EVAL:
            eval_metric_ops = call_with_tensors(*self.eval_metrics)
        host_hooks: tuple[HostCallHook, ...] = ()
        if self.host_call is not None and self.mode != ModeKeys.PREDICT:
            host_hooks = (HostCallHook(self.host_call),)
        return EstimatorSpec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=eval_metric_ops,
            export_outputs=self.export_outputs,
            scaffold=self.scaffold(),
            training_hooks=tuple(self.training_hooks) + (host_hooks if self.mode == ModeKeys.TRAIN else ()),
            evaluation_hooks=tuple(self.evaluation_hooks) + (host_hooks if self.mode == ModeKeys.EVAL else ()),
            prediction_hooks=self.prediction_hooks,
        )


__all__ = ["TPUEstimatorSpec"]
