"""TPUEstimatorSpec (``tf.estimator.tpu.TPUEstimatorSpec``)."""

from __future__ import annotations

from jaxspec._checks import type_name
from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.fn_tensors import call_with_tensors
from jaxspec.rules.spec_classes import TPUEstimatorSpecBase
from jaxspec.spec._pytree import register_spec_pytree
from jaxspec.spec.estimator_spec import EstimatorSpec, JaxSpecValues
from jaxspec.spec.host_call import HostCallHook
from jaxspec.spec.scaffold import Scaffold


class TPUEstimatorSpec(TPUEstimatorSpecBase):
    """What a TPUEstimator model_fn returns, as ``tf.estimator.tpu.TPUEstimatorSpec``.

    On the mesh (``use_tpu=True``) model_fn runs once per replica. ``eval_metrics`` and
    ``host_call`` are ``(fn, tensors)`` pairs: each tensor is gathered from all replicas
    (concatenated on axis 0, replica 0 first, so on the mesh each needs rank >= 1; a
    scalar is a ValueError when the step is traced) and ``fn`` is called with them,
    ``*tensors`` for a list/tuple and ``**tensors`` for a dict. ``metric_fn`` returns a
    dict of metric states and runs inside the compiled eval step; ``host_fn`` runs on the
    host once per step of TRAIN and EVAL, in step order, with numpy arrays (its return
    value is ignored; TPUEstimator also ran it in PREDICT, jaxspec does not). JAX
    differences: ``train_op`` is the new state pytree, and ``scaffold_fn`` returns a
    ``jaxspec.Scaffold``.

    Args:
      mode: a ModeKeys value (or None, which skips the per-mode requirements).
      predictions: array ``[batch, ...]`` or dict of arrays (required in PREDICT;
        TPUEstimator on the mesh needs a dict).
      loss: numeric array with one element, stored as ``[]`` (required in TRAIN, EVAL).
      train_op: the new state pytree (required in TRAIN).
      eval_metrics: ``(metric_fn, tensors)``.
      export_outputs: dict of name to ExportOutput (checked and defaulted in PREDICT).
      scaffold_fn: ``() -> Scaffold``, called by the Estimator (or ``scaffold()``).
      host_call: ``(host_fn, tensors)``.
      training_hooks, evaluation_hooks, prediction_hooks: SessionRunHooks.

    Raises:
      ValueError / TypeError / RuntimeError: for a malformed ``eval_metrics`` or
        ``host_call``, the types TPUEstimator raises (see ``validate_fn_tensors_pair``);
        otherwise as EstimatorSpec (missing or malformed loss, train_op, predictions,
        hooks, export_outputs).
      TypeError: ``scaffold_fn`` is not callable (TPUEstimator finds out only when it
        calls it).
    """

    __slots__ = ()
    values = JaxSpecValues()

    def scaffold(self) -> Scaffold:
        """Call ``scaffold_fn`` (a default Scaffold when there is none).

        Raises:
          ValueError: scaffold_fn returned None (as TPUEstimator).
          TypeError: scaffold_fn returned something other than a Scaffold.
        """
        if self.scaffold_fn is None:
            return Scaffold()
        scaffold = self.scaffold_fn()
        if scaffold is None:
            raise ValueError(f"{type(self).__name__}: scaffold_fn returned None; it must return a Scaffold.")
        if not isinstance(scaffold, Scaffold):
            raise TypeError(
                f"{type(self).__name__}: scaffold_fn must return a jaxspec.Scaffold, got {type_name(scaffold)}."
            )
        return scaffold

    def as_estimator_spec(self) -> EstimatorSpec:
        """The EstimatorSpec TPUEstimator uses off the mesh (``use_tpu=False``).

        ``eval_metric_ops`` is ``metric_fn`` applied to the tensors (only computed when
        ``mode`` is not TRAIN or PREDICT, where it would be ignored); ``host_call``
        becomes a hook in all three hook lists, so the engine calls ``host_fn`` once per
        step; the scaffold comes from ``scaffold_fn``. As TPUEstimator on CPU.

        Raises:
          ValueError / TypeError: as ``scaffold()``, or as EstimatorSpec for the result
            of metric_fn.
        """
        eval_metric_ops = None
        if self.eval_metrics is not None and self.mode not in (ModeKeys.TRAIN, ModeKeys.PREDICT):
            eval_metric_ops = call_with_tensors(*self.eval_metrics)
        host_hooks = () if self.host_call is None else (HostCallHook(self.host_call),)
        spec: EstimatorSpec = self._estimator_spec(
            EstimatorSpec, eval_metric_ops, self.scaffold(), host_hooks
        )
        return spec


register_spec_pytree(TPUEstimatorSpec, ("predictions", "loss", "train_op"), ("eval_metrics", "host_call"))

__all__ = ["TPUEstimatorSpec"]
