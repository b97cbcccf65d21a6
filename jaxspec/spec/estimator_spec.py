"""EstimatorSpec: what a model_fn returns (``tf.estimator.EstimatorSpec``)."""

from __future__ import annotations

import collections
from typing import Any

import jax

from jaxspec._checks import is_array, is_sparse, type_name
from jaxspec.export.export_output import ExportOutput, PredictOutput
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.spec.scaffold import Scaffold

SERVING_DEFAULT = "serving_default"

_FIELDS = [
    "mode",
    "predictions",
    "loss",
    "train_op",
    "eval_metric_ops",
    "export_outputs",
    "training_chief_hooks",
    "training_hooks",
    "scaffold",
    "evaluation_hooks",
    "prediction_hooks",
]


def check_mode(mode: Any) -> str:
    """Return ``mode`` if it is one of ModeKeys' values; ValueError otherwise."""
    if mode not in ModeKeys.all():
        raise ValueError(f"mode must be one of {ModeKeys.all()}, got {mode!r}.")
    return mode


def check_loss(loss: Any, mode: str, cls: str) -> Any:
    """Validate ``loss`` for TRAIN/EVAL; return it as a scalar (shape [1] is reshaped)."""
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise ValueError(f"{cls}: loss is required in {mode} mode.")
        return None
    if is_sparse(loss) or not is_array(loss):
        raise TypeError(f"{cls}: loss must be a dense array, got {type_name(loss)}.")
    if loss.shape == (1,):
        return loss.reshape(())
    if loss.shape != ():
        raise ValueError(f"{cls}: loss must be a scalar or shape [1], got shape {tuple(loss.shape)}.")
    return loss


def check_train_op(train_op: Any, mode: str, cls: str) -> Any:
    """In TRAIN, ``train_op`` (the new state pytree) is required and must hold arrays."""
    if train_op is None:
        if mode == ModeKeys.TRAIN:
            raise ValueError(f"{cls}: train_op (the new state) is required in TRAIN mode.")
        return None
    leaves = jax.tree.leaves(train_op)
    if isinstance(train_op, (str, bytes)) or any(not is_array(v) for v in leaves):
        raise TypeError(
            f"{cls}: train_op must be the new state, a pytree of arrays, got {type_name(train_op)}."
        )
    return train_op


def check_predictions(predictions: Any, mode: str, cls: str) -> Any:
    """Predictions: an array or a dict of arrays; required in PREDICT."""
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise ValueError(f"{cls}: predictions is required in PREDICT mode.")
        return None
    if isinstance(predictions, dict):
        for key, value in predictions.items():
            if is_sparse(value) or not is_array(value):
                raise TypeError(
                    f"{cls}: predictions[{key!r}] must be a dense array, got {type_name(value)}."
                )
    elif is_sparse(predictions) or not is_array(predictions):
        raise TypeError(
            f"{cls}: predictions must be an array or a dict of arrays, got {type_name(predictions)}."
        )
    return predictions


def check_hooks(hooks: Any, field: str, cls: str) -> tuple[SessionRunHook, ...]:
    """Return ``hooks`` as a tuple of SessionRunHook; TypeError naming the bad entry."""
    hooks = tuple(hooks or ())
    for hook in hooks:
        if not isinstance(hook, SessionRunHook):
            raise TypeError(f"{cls}: every entry of {field} must be a SessionRunHook, got {type_name(hook)}.")
    return hooks


def check_scaffold(scaffold: Any, cls: str) -> Scaffold:
    """None becomes a default Scaffold; anything but a Scaffold is a TypeError."""
    if scaffold is None:
        return Scaffold()
    if not isinstance(scaffold, Scaffold):
        raise TypeError(f"{cls}: scaffold must be a Scaffold, got {type_name(scaffold)}.")
    return scaffold


def check_eval_metric_ops(ops: Any, cls: str) -> dict[str, Any]:
    """A dict of metric states (``merge``/``compute``), Keras-style metrics
    (``update_state``/``result``) or ``(value, update)`` pairs."""
    if ops is None:
        return {}
    if not isinstance(ops, dict):
        raise TypeError(f"{cls}: eval_metric_ops must be a dict, got {type_name(ops)}.")
    for key, value in ops.items():
        is_state = callable(getattr(value, "merge", None)) and callable(getattr(value, "compute", None))
        is_keras = callable(getattr(value, "update_state", None)) and callable(getattr(value, "result", None))
        is_pair = isinstance(value, tuple) and len(value) == 2
        if not (is_state or is_keras or is_pair):
            raise TypeError(
                f"{cls}: eval_metric_ops[{key!r}] must be a metric state or a (value, update) "
                f"pair, got {type_name(value)}."
            )
    return dict(ops)


def check_export_outputs(export_outputs: Any, predictions: Any, cls: str) -> dict[str, ExportOutput]:
    """PREDICT only: default, alias and check the heads as tf.estimator does."""
    if export_outputs is None:
        return {SERVING_DEFAULT: PredictOutput(predictions)}
    if not isinstance(export_outputs, dict):
        raise TypeError(f"{cls}: export_outputs must be a dict, got {type_name(export_outputs)}.")
    for key, value in export_outputs.items():
        if not isinstance(value, ExportOutput):
            raise TypeError(
                f"{cls}: export_outputs[{key!r}] must be an ExportOutput, got {type_name(value)}."
            )
    export_outputs = dict(export_outputs)
    if SERVING_DEFAULT not in export_outputs:
        if len(export_outputs) == 1:
            export_outputs[SERVING_DEFAULT] = next(iter(export_outputs.values()))
        else:
            raise ValueError(
                f"{cls}: export_outputs has {len(export_outputs)} heads and none is keyed "
                f"{SERVING_DEFAULT!r}; mark one as the default."
            )
    return export_outputs


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _FIELDS)):
    """What a model_fn returns, as ``tf.estimator.EstimatorSpec``.

    Per mode: TRAIN needs ``loss`` and ``train_op``; EVAL needs ``loss``; PREDICT needs
    ``predictions``. JAX differences: ``train_op`` is the new state pytree (same tree
    structure, shapes and dtypes as the ``state`` model_fn received; the Estimator checks
    this), and ``eval_metric_ops`` values are metric states from ``jaxspec.metrics`` (or
    ``(value, update)`` pairs / Keras-style metrics).

    Args:
      mode: a ModeKeys value.
      predictions: array ``[batch, ...]`` or dict of str to such arrays.
      loss: float scalar (shape ``[]`` or ``[1]``; ``[1]`` is reshaped to a scalar).
      train_op: the new state pytree (TRAIN).
      eval_metric_ops: dict of str to metric states (EVAL).
      export_outputs: dict of str to ExportOutput (PREDICT; defaulted and aliased to
        ``serving_default`` as TF does; ignored in other modes).
      training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks: iterables
        of SessionRunHook, stored as tuples.
      scaffold: a Scaffold, or None for a default one.

    Raises:
      ValueError: a field required by ``mode`` is missing, loss is not a scalar, or several
        export heads have no ``serving_default``.
      TypeError: a field has the wrong type (the message names the field and key).
    """

    def __new__(
        cls,
        mode: str,
        predictions: Any = None,
        loss: Any = None,
        train_op: Any = None,
        eval_metric_ops: Any = None,
        export_outputs: Any = None,
        training_chief_hooks: Any = None,
        training_hooks: Any = None,
        scaffold: Any = None,
        evaluation_hooks: Any = None,
        prediction_hooks: Any = None,
    ) -> EstimatorSpec:
        name = cls.__name__
        mode = check_mode(mode)
        predictions = check_predictions(predictions, mode, name)
        loss = check_loss(loss, mode, name)
        train_op = check_train_op(train_op, mode, name)
        eval_metric_ops = check_eval_metric_ops(eval_metric_ops, name)
        if mode == ModeKeys.PREDICT:
            export_outputs = check_export_outputs(export_outputs, predictions, name)
        return super().__new__(
            cls,
            mode=mode,
            predictions=predictions,
            loss=loss,
            train_op=train_op,
            eval_metric_ops=eval_metric_ops,
            export_outputs=export_outputs,
            training_chief_hooks=check_hooks(training_chief_hooks, "training_chief_hooks", name),
            training_hooks=check_hooks(training_hooks, "training_hooks", name),
            scaffold=check_scaffold(scaffold, name),
            evaluation_hooks=check_hooks(evaluation_hooks, "evaluation_hooks", name),
            prediction_hooks=check_hooks(prediction_hooks, "prediction_hooks", name),
        )

    def _replace(self, **kwds: Any) -> EstimatorSpec:
        """Return a copy with fields replaced; re-validated; ``mode`` cannot change."""
        if "mode" in kwds and kwds["mode"] != self.mode:
            raise ValueError(f"{type(self).__name__}: mode is fixed once the spec is built.")
        fields = self._asdict()
        fields.update(kwds)
        return type(self)(**fields)
