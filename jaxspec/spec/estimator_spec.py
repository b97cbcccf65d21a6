"""EstimatorSpec: what a model_fn returns (``tf.estimator.EstimatorSpec``).

The ``check_*`` functions are shared with TPUEstimatorSpec and NPUEstimatorSpec; each
raises the exception type tf.estimator raises for the same field, with a message that
names the spec class and the field.
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import numpy as np

from jaxspec._checks import is_dense_array, is_number_leaf, is_sparse, type_name
from jaxspec.export.export_output import ExportOutput, PredictOutput
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec._pytree import register_spec_pytree
from jaxspec.spec.fn_types import PyTree, State
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.spec.scaffold import Scaffold

SERVING_DEFAULT = "serving_default"


def check_mode(mode: Any, cls: str) -> str | None:
    """Return ``mode`` if it is None or one of ModeKeys' values.

    tf.estimator does not check ``mode`` at all, and a spec built with ``mode=None``
    skips every per-mode requirement (an Estimator does not cross-check it against the
    phase); jaxspec keeps that, but rejects any other value so a typo such as
    ``'predict'`` (ModeKeys.PREDICT is ``'infer'``) does not silently skip validation.

    Raises:
      ValueError: ``mode`` is neither None nor a ModeKeys value.
    """
    if mode is not None and (not isinstance(mode, str) or mode not in ModeKeys.all()):
        raise ValueError(f"{cls}: mode must be one of {ModeKeys.all()} (or None), got {mode!r}.")
    return mode


def check_loss(loss: Any, mode: str | None, cls: str) -> Any:
    """Validate ``loss``; return it as a scalar.

    Required in TRAIN and EVAL. Any shape holding exactly one element (``[]``, ``[1]``,
    ``[1, 1]``) is accepted and reshaped to ``[]``, as tf.estimator does.

    Raises:
      ValueError: missing in TRAIN/EVAL, or more (or fewer) than one element.
      TypeError: not a dense numeric array (a Python float, a sparse array, a string).
    """
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise ValueError(f"{cls}: loss is required in {mode} mode, got None.")
        return None
    if not is_dense_array(loss) or np.dtype(loss.dtype).kind not in "biufcV":
        raise TypeError(
            f"{cls}: loss must be a dense numeric JAX or numpy array, got {type_name(loss)}"
            f"{'' if not hasattr(loss, 'dtype') else f' of dtype {loss.dtype}'}."
        )
    if int(np.prod(loss.shape, dtype=np.int64)) != 1:
        raise ValueError(f"{cls}: loss must be a scalar (one element), got shape {tuple(loss.shape)}.")
    return loss if loss.shape == () else loss.reshape(())


def check_train_op(train_op: Any, mode: str | None, cls: str) -> Any:
    """``train_op`` is the new state pytree; required in TRAIN.

    The spec only checks that it is a pytree of arrays (or numbers); the Estimator checks
    that its tree structure, shapes and dtypes equal those of ``state``.

    Raises:
      ValueError: missing in TRAIN.
      TypeError: a leaf is not an array or a number (a string, an op, ...); the message
        names that leaf.
    """
    if train_op is None:
        if mode == ModeKeys.TRAIN:
            raise ValueError(f"{cls}: train_op (the new state pytree) is required in TRAIN mode, got None.")
        return None
    leaves, _ = jax.tree_util.tree_flatten_with_path(train_op)
    for path, leaf in leaves:
        if not is_number_leaf(leaf) or is_sparse(leaf):
            where = f"train_op{jax.tree_util.keystr(path)}"
            raise TypeError(
                f"{cls}: train_op must be the new state, a pytree of arrays; {where} is a {type_name(leaf)}."
            )
    return train_op


def check_predictions(predictions: Any, mode: str | None, cls: str) -> Any:
    """Predictions: a dense array or a dict of dense arrays; required in PREDICT.

    ``None`` in another mode becomes ``{}``, as in tf.estimator.

    Raises:
      ValueError: missing in PREDICT.
      TypeError: not an array or dict, or a dict value that is not a dense array (the
        message names the key).
    """
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise ValueError(f"{cls}: predictions is required in PREDICT mode, got None.")
        return {}
    if isinstance(predictions, dict):
        for key, value in predictions.items():
            if not is_dense_array(value):
                raise TypeError(
                    f"{cls}: predictions[{key!r}] must be a dense JAX or numpy array, got {type_name(value)}."
                )
        return dict(predictions)
    if not is_dense_array(predictions):
        raise TypeError(
            f"{cls}: predictions must be an array or a dict of arrays, got {type_name(predictions)}."
        )
    return predictions


def check_hooks(hooks: Any, field: str, cls: str) -> tuple[SessionRunHook, ...]:
    """Return ``hooks`` (an iterable or None) as a tuple of SessionRunHook.

    Raises:
      TypeError: ``hooks`` is not iterable, or an entry is not a SessionRunHook (named).
    """
    if hooks is None:
        return ()
    if isinstance(hooks, SessionRunHook) or isinstance(hooks, (str, bytes, dict)):
        raise TypeError(f"{cls}: {field} must be a list or tuple of SessionRunHook, got {type_name(hooks)}.")
    try:
        hooks = tuple(hooks)
    except TypeError:
        raise TypeError(
            f"{cls}: {field} must be an iterable of SessionRunHook, got {type_name(hooks)}."
        ) from None
    for i, hook in enumerate(hooks):
        if not isinstance(hook, SessionRunHook):
            raise TypeError(f"{cls}: {field}[{i}] is not a SessionRunHook: got {type_name(hook)} ({hook!r}).")
    return hooks


def check_scaffold(scaffold: Any, cls: str) -> Scaffold:
    """None becomes a default Scaffold.

    Raises:
      TypeError: ``scaffold`` is not a jaxspec.Scaffold.
    """
    if scaffold is None:
        return Scaffold()
    if not isinstance(scaffold, Scaffold):
        raise TypeError(f"{cls}: scaffold must be a jaxspec.Scaffold, got {type_name(scaffold)}.")
    return scaffold


def _is_metric(value: Any) -> bool:
    is_state = callable(getattr(value, "merge", None)) and callable(getattr(value, "compute", None))
    is_keras = callable(getattr(value, "update_state", None)) and callable(getattr(value, "result", None))
    return is_state or is_keras


def check_eval_metric_ops(ops: Any, cls: str) -> dict[Any, Any]:
    """A dict whose values are metric states (``merge``/``compute``, from
    ``jaxspec.metrics``), Keras-style metrics (``update_state``/``result``) or
    ``(value, update)`` tuples of two. None becomes ``{}``.

    Raises:
      TypeError: not a dict, or a value of another kind (the message names the key).
    """
    if ops is None:
        return {}
    if not isinstance(ops, dict):
        raise TypeError(f"{cls}: eval_metric_ops must be a dict, got {type_name(ops)}.")
    for key, value in ops.items():
        if not (_is_metric(value) or (isinstance(value, tuple) and len(value) == 2)):
            raise TypeError(
                f"{cls}: eval_metric_ops[{key!r}] must be a metric state or a (value, update) "
                f"tuple, got {type_name(value)}."
            )
    return dict(ops)


def check_export_outputs(
    export_outputs: Any,
    predictions: Any,
    cls: str,
    output_type: type = ExportOutput,
    predict_output: Any = PredictOutput,
    expected: str = "an ExportOutput",
) -> dict[Any, Any]:
    """PREDICT only: default, alias and check the heads as tf.estimator does.

    None becomes ``{'serving_default': predict_output(predictions)}``; a single head not
    keyed ``serving_default`` is also stored under that key (the same object). The input
    dict is not modified (tf.estimator adds the alias to the caller's dict).
    ``output_type`` / ``predict_output`` / ``expected`` are jaxspec's ExportOutput
    classes by default; ``tf_bridge`` passes TensorFlow's.

    Raises:
      TypeError: not a dict, or a value that is not an ``output_type`` (the key is named).
      ValueError: several heads and none keyed ``serving_default``; or predictions that
        ``predict_output`` rejects when the default head is built.
    """
    if export_outputs is None:
        return {SERVING_DEFAULT: predict_output(predictions)}
    if not isinstance(export_outputs, dict):
        raise TypeError(f"{cls}: export_outputs must be a dict, got {type_name(export_outputs)}.")
    for key, value in export_outputs.items():
        if not isinstance(value, output_type):
            raise TypeError(f"{cls}: export_outputs[{key!r}] must be {expected}, got {type_name(value)}.")
    export_outputs = dict(export_outputs)
    if len(export_outputs) == 1:
        export_outputs.setdefault(SERVING_DEFAULT, next(iter(export_outputs.values())))
    elif len(export_outputs) > 1 and SERVING_DEFAULT not in export_outputs:
        raise ValueError(
            f"{cls}: export_outputs has {len(export_outputs)} heads {sorted(map(str, export_outputs))} "
            f"and none is keyed {SERVING_DEFAULT!r}; key the default head so."
        )
    return export_outputs


def check_mode_unchanged(spec: Any, kwds: dict[str, Any]) -> None:
    """``_replace`` may not change ``mode`` (ValueError), as tf.estimator."""
    if "mode" in kwds and kwds["mode"] != spec.mode:
        raise ValueError(
            f"{type(spec).__name__}: mode is fixed once the spec is built ({spec.mode!r}); "
            f"_replace got mode={kwds['mode']!r}."
        )


class EstimatorSpec(
    collections.namedtuple(  # the fields as a literal list, which type checkers read
        "EstimatorSpec",
        [
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
        ],
    )
):
    """What a model_fn returns, as ``tf.estimator.EstimatorSpec``.

    Per mode: TRAIN needs ``loss`` and ``train_op``; EVAL needs ``loss``; PREDICT needs
    ``predictions``. Fields a mode does not use are accepted and ignored. ``mode=None``
    skips the per-mode requirements (tf.estimator accepts it too). JAX differences:
    ``train_op`` is the new state pytree (same tree structure, shapes and dtypes as the
    ``state`` model_fn received; the Estimator checks that, ValueError naming the first
    leaf that differs), and ``eval_metric_ops`` values are metric states from
    ``jaxspec.metrics`` (or ``(value, update)`` tuples / Keras-style metrics). The spec is
    an immutable namedtuple and a JAX pytree whose leaves are its arrays.

    Args:
      mode: a ModeKeys value, or None.
      predictions: array ``[batch, ...]`` or dict of such arrays (``{}`` when None
        outside PREDICT).
      loss: numeric array with one element (``[]``, ``[1]``, ...); stored as ``[]``.
      train_op: the new state pytree (TRAIN).
      eval_metric_ops: dict of metric states or ``(value, update)`` tuples (EVAL).
      export_outputs: dict of name to ExportOutput; checked, defaulted and aliased to
        ``serving_default`` in PREDICT only, as tf.estimator does.
      training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks:
        iterables of SessionRunHook, stored as tuples.
      scaffold: a jaxspec.Scaffold, or None for a default one.

    Raises:
      ValueError: a field the mode requires is missing; loss has more than one element;
        several export heads and no ``serving_default``; an unknown mode.
      TypeError: a field has the wrong type (the message names the field, and the key
        for dict fields).
    """

    __slots__ = ()

    def __new__(
        cls,
        mode: str | None,
        predictions: PyTree = None,
        loss: Any = None,
        train_op: State = None,
        eval_metric_ops: Any = None,
        export_outputs: Any = None,
        training_chief_hooks: Any = None,
        training_hooks: Any = None,
        scaffold: Any = None,
        evaluation_hooks: Any = None,
        prediction_hooks: Any = None,
    ) -> EstimatorSpec:
        name = cls.__name__
        mode = check_mode(mode, name)
        train_op = check_train_op(train_op, mode, name)
        loss = check_loss(loss, mode, name)
        predictions = check_predictions(predictions, mode, name)
        if mode == ModeKeys.PREDICT:
            export_outputs = check_export_outputs(export_outputs, predictions, name)
        return super().__new__(
            cls,
            mode=mode,
            predictions=predictions,
            loss=loss,
            train_op=train_op,
            eval_metric_ops=check_eval_metric_ops(eval_metric_ops, name),
            export_outputs=export_outputs,
            training_chief_hooks=check_hooks(training_chief_hooks, "training_chief_hooks", name),
            training_hooks=check_hooks(training_hooks, "training_hooks", name),
            scaffold=check_scaffold(scaffold, name),
            evaluation_hooks=check_hooks(evaluation_hooks, "evaluation_hooks", name),
            prediction_hooks=check_hooks(prediction_hooks, "prediction_hooks", name),
        )

    def _replace(self, **kwds: Any) -> EstimatorSpec:
        """A copy with fields replaced, validated again as by the constructor.

        Raises:
          ValueError: ``mode`` would change, or the new fields fail validation.
          TypeError: as the constructor.
        """
        check_mode_unchanged(self, kwds)
        fields = self._asdict()
        fields.update(kwds)
        return type(self)(**fields)


register_spec_pytree(EstimatorSpec, ("predictions", "loss", "train_op", "eval_metric_ops"))
