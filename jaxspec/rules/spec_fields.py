"""The field rules tf.estimator's three spec classes share, for jaxspec's specs (JAX
arrays, state pytrees) and tf_bridge's (tensors, ops): what each mode requires, the mode
itself, hooks, scaffold, the structure of predictions, eval_metric_ops and
export_outputs, and ``_replace``'s fixed mode.

Pure Python. What a value must be (a dense JAX array or a ``tf.Tensor``, a jaxspec
Scaffold or a TF one, ...) is the caller's: it passes the type, a test or a label. Each
check raises the exception type tf.estimator raises for the same field, with a message
naming the spec class and the field (the key, or index, for dicts and lists).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, cast

from jaxspec.mode_keys import ModeKeys

SERVING_DEFAULT = "serving_default"

# A side's class: its SessionRunHook, Scaffold or ExportOutput.
T = TypeVar("T")


class SpecTuple(Protocol):
    """What ``_replace``'s rules read of a spec (either side's, any of the three classes)."""

    @property
    def mode(self) -> str | None: ...

    def _asdict(self) -> dict[str, object]: ...


def type_name(x: object) -> str:
    """The name of ``x``'s type, for error messages."""
    return type(x).__name__


def check_mode(mode: object, cls: str) -> str | None:
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


def require_loss(mode: str | None, cls: str) -> None:
    """A missing ``loss``: allowed in PREDICT (and with ``mode=None``).

    Raises:
      ValueError: ``mode`` is TRAIN or EVAL.
    """
    if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
        raise ValueError(f"{cls}: loss is required in {mode} mode, got None.")


def require_train_op(mode: str | None, cls: str) -> None:
    """A missing ``train_op``: allowed outside TRAIN.

    Raises:
      ValueError: ``mode`` is TRAIN.
    """
    if mode == ModeKeys.TRAIN:
        raise ValueError(f"{cls}: train_op (the new state pytree) is required in TRAIN mode, got None.")


def check_predictions(
    predictions: object,
    mode: str | None,
    cls: str,
    is_dense: Callable[[object], bool],
    dense: str,
    check_value: Callable[[object, str], None] | None = None,
) -> object:
    """``predictions``: one dense value or a dict of them; required in PREDICT. ``None``
    in another mode becomes ``{}``, as in tf.estimator.

    Args:
      predictions: what model_fn gave.
      mode: the spec's mode.
      cls: the spec class's name, for messages.
      is_dense: the side's test of one value (a dense array, a dense tensor).
      dense: that test in words (``'a dense JAX or numpy array'``).
      check_value: a further check of each dense value, given it and its field name
        (tf_bridge checks the graph); it raises what it finds.

    Returns:
      ``predictions`` (a dict is copied).

    Raises:
      ValueError: missing in PREDICT.
      TypeError: neither a dense value nor a dict, or a dict value that is not dense
        (the key is named).
    """
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise ValueError(f"{cls}: predictions is required in PREDICT mode, got None.")
        return {}
    values = predictions.items() if isinstance(predictions, dict) else [(None, predictions)]
    for key, value in values:
        field = "predictions" if key is None else f"predictions[{key!r}]"
        if not is_dense(value):
            expected = f"{dense} or a dict of them" if key is None else dense
            raise TypeError(f"{cls}: {field} must be {expected}, got {type_name(value)}.")
        if check_value is not None:
            check_value(value, field)
    return dict(predictions) if isinstance(predictions, dict) else predictions


def check_hooks(hooks: object, field: str, cls: str, hook_type: type[T], label: str) -> tuple[T, ...]:
    """Return ``hooks`` (an iterable or None) as a tuple of ``hook_type``.

    Args:
      hooks: the field's value.
      field: its name (``'training_hooks'``, ...).
      cls: the spec class's name.
      hook_type: the side's SessionRunHook class.
      label: that class in words, for messages.

    Raises:
      TypeError: ``hooks`` is a single hook, a string or a dict, or not iterable; or an
        entry is not a ``hook_type`` (named by its index).
    """
    if hooks is None:
        return ()
    if isinstance(hooks, (hook_type, str, bytes, dict)):
        raise TypeError(f"{cls}: {field} must be a list or tuple of SessionRunHook, got {type_name(hooks)}.")
    try:
        entries = tuple(cast("Iterable[object]", hooks))  # tuple() raises TypeError if it is not
    except TypeError:
        raise TypeError(
            f"{cls}: {field} must be an iterable of SessionRunHook, got {type_name(hooks)}."
        ) from None
    checked: list[T] = []
    for i, hook in enumerate(entries):
        if not isinstance(hook, hook_type):
            raise TypeError(f"{cls}: {field}[{i}] is not a {label}: got {type_name(hook)} ({hook!r}).")
        checked.append(hook)
    return tuple(checked)


def check_scaffold(scaffold: object, cls: str, scaffold_type: type[T], label: str) -> T:
    """``scaffold``: None becomes ``scaffold_type()``, the default Scaffold.

    Raises:
      TypeError: ``scaffold`` is not a ``scaffold_type`` (``label`` names it).
    """
    if scaffold is None:
        return scaffold_type()
    if not isinstance(scaffold, scaffold_type):
        raise TypeError(f"{cls}: scaffold must be a {label}, got {type_name(scaffold)}.")
    return scaffold


def check_scaffold_fn(scaffold_fn: object, cls: str) -> Callable[..., object] | None:
    """TPUEstimatorSpec's ``scaffold_fn``: None or a callable (TPUEstimator finds out only
    when it calls it; jaxspec checks at once).

    Raises:
      TypeError: not callable.
    """
    if scaffold_fn is not None and not callable(scaffold_fn):
        raise TypeError(f"{cls}: scaffold_fn must be callable, got {type_name(scaffold_fn)}.")
    return scaffold_fn


def _is_metric(value: object) -> bool:
    is_state = callable(getattr(value, "merge", None)) and callable(getattr(value, "compute", None))
    is_keras = callable(getattr(value, "update_state", None)) and callable(getattr(value, "result", None))
    return is_state or is_keras


def check_eval_metric_ops(ops: object, cls: str) -> dict[str, object]:
    """The structure of ``eval_metric_ops``: a dict whose values are metric states
    (``merge``/``compute``, jaxspec.metrics), Keras-style metrics
    (``update_state``/``result``) or ``(value, update)`` tuples of two. None becomes
    ``{}``; the dict is copied.

    Raises:
      TypeError: not a dict, or a value of another kind (the key is named).
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
    export_outputs: object,
    predictions: object,
    cls: str,
    output_type: type[T],
    predict_output: Callable[[object], T],
    expected: str,
) -> dict[str, T]:
    """PREDICT only: default, alias and check the heads as tf.estimator does.

    None becomes ``{'serving_default': predict_output(predictions)}``; a single head not
    keyed ``serving_default`` is also stored under that key (the same object). The input
    dict is not modified (tf.estimator adds the alias to the caller's dict).

    Args:
      export_outputs: the field's value.
      predictions: the checked predictions (for the default head).
      cls: the spec class's name.
      output_type: the side's ExportOutput base class.
      predict_output: the side's PredictOutput class.
      expected: ``output_type`` in words, for messages.

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


def check_mode_unchanged(spec: SpecTuple, kwds: dict[str, object]) -> None:
    """``_replace`` may not change ``mode``, as tf.estimator.

    Raises:
      ValueError: ``kwds`` holds a ``mode`` other than ``spec.mode``.
    """
    if "mode" in kwds and kwds["mode"] != spec.mode:
        raise ValueError(
            f"{type(spec).__name__}: mode is fixed once the spec is built ({spec.mode!r}); "
            f"_replace got mode={kwds['mode']!r}."
        )
