"""The constructors of tf.estimator's three spec classes, written once for jaxspec's
specs and tf_bridge's: the fields, TF's signatures (names, order, defaults), the order
of the checks, ``_replace``, NPUEstimatorSpec's ``host_call`` and the EstimatorSpec a
TPUEstimatorSpec becomes off the TPU.

What a value must be differs between the sides (a JAX array or state pytree; a
``tf.Tensor`` or ``tf.Operation``), so each side's classes name a ``SpecValues``, its
checks of the values, as the class attribute ``values``. Pure Python.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable
from typing import Any, ClassVar, Self, TypeVar

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.fn_tensors import FnTensors, validate_fn_tensors_pair
from jaxspec.rules.spec_fields import (
    check_eval_metric_ops,
    check_export_outputs,
    check_hooks,
    check_mode,
    check_mode_unchanged,
    check_predictions,
    check_scaffold,
    check_scaffold_fn,
)

Spec = TypeVar("Spec", bound="EstimatorSpecBase | TPUEstimatorSpecBase")
# The side's EstimatorSpec, which a TPUEstimatorSpec becomes off the TPU.
OffTPU = TypeVar("OffTPU", bound="EstimatorSpecBase")


class SpecValues(abc.ABC):
    """One side's checks of a spec's values; each raises what tf.estimator raises for the
    field (TypeError for a wrong kind, ValueError for a missing required value or a bad
    shape), naming the spec class ``cls`` and the field.

    A side gives ``loss`` and ``train_op``, and its kinds of value as class attributes:
    ``dense_of`` (the test of one dense prediction, and its words), ``hooks_of`` and
    ``scaffold_of`` (the SessionRunHook and Scaffold classes, and their words),
    ``outputs_of`` (the ExportOutput base class, the PredictOutput class, and words).
    The other fields follow ``jaxspec.rules.spec_fields`` with those kinds.
    """

    dense_of: ClassVar[tuple[Callable[[Any], bool], str]]
    hooks_of: ClassVar[tuple[type, str]]
    scaffold_of: ClassVar[tuple[type, str]]
    outputs_of: ClassVar[tuple[type, Callable[[Any], Any], str]]

    @abc.abstractmethod
    def loss(self, loss: object, mode: str | None, cls: str) -> object:
        """``loss`` with one element, returned with shape ``[]`` (None where allowed)."""

    @abc.abstractmethod
    def train_op(self, train_op: object, mode: str | None, cls: str) -> object:
        """``train_op`` (None where allowed)."""

    def check_value(self, value: object, field: str, cls: str) -> None:
        """A further check of each dense prediction (none here; tf_bridge checks the
        graph)."""
        return None

    def predictions(self, predictions: object, mode: str | None, cls: str) -> object:
        """``predictions``: a dense value or dict of them; ``{}`` for None outside PREDICT."""
        is_dense, words = self.dense_of
        return check_predictions(
            predictions, mode, cls, is_dense, words, lambda value, field: self.check_value(value, field, cls)
        )

    def eval_metric_ops(self, ops: object, cls: str) -> dict[str, object]:
        """``eval_metric_ops`` as a dict (``{}`` for None), see ``check_eval_metric_ops``."""
        return check_eval_metric_ops(ops, cls)

    def export_outputs(self, export_outputs: object, predictions: object, cls: str) -> dict[str, object]:
        """PREDICT's ``export_outputs``, defaulted and aliased to ``serving_default``."""
        output_type, predict_output, words = self.outputs_of
        return check_export_outputs(export_outputs, predictions, cls, output_type, predict_output, words)

    def hooks(self, hooks: object, field: str, cls: str) -> tuple[object, ...]:
        """A hook list ``field`` as a tuple of the side's SessionRunHooks."""
        return check_hooks(hooks, field, cls, *self.hooks_of)

    def scaffold(self, scaffold: object, cls: str) -> object:
        """``scaffold``, the side's default Scaffold for None."""
        return check_scaffold(scaffold, cls, *self.scaffold_of)


def _checked_core(
    values: SpecValues,
    cls: str,
    mode: object,
    predictions: object,
    loss: object,
    train_op: object,
    export_outputs: object,
) -> dict[str, object]:
    """The fields every spec class has, checked in tf.estimator's order."""
    mode = check_mode(mode, cls)
    fields: dict[str, object] = {
        "mode": mode,
        "train_op": values.train_op(train_op, mode, cls),
        "loss": values.loss(loss, mode, cls),
        "predictions": values.predictions(predictions, mode, cls),
    }
    if mode == ModeKeys.PREDICT:
        export_outputs = values.export_outputs(export_outputs, fields["predictions"], cls)
    fields["export_outputs"] = export_outputs
    return fields


def _checked_hooks(values: SpecValues, cls: str, **hooks: object) -> dict[str, tuple[object, ...]]:
    return {field: values.hooks(value, field, cls) for field, value in hooks.items()}


def replaced(spec: Spec, kwds: dict[str, object], **extra: object) -> Spec:
    """``spec._replace(**kwds)``: a new spec of the same class, validated again;
    ``extra`` are fields kept outside the tuple (NPUEstimatorSpec's host_call).

    Raises:
      ValueError: ``mode`` would change; or what the constructor raises.
    """
    check_mode_unchanged(spec, kwds)
    fields = {**spec._asdict(), **extra, **kwds}
    return type(spec)(**fields)


class EstimatorSpecBase(
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
    """``tf.estimator.EstimatorSpec``'s constructor, over a side's ``values``.

    TRAIN needs ``loss`` and ``train_op``, EVAL ``loss``, PREDICT ``predictions``;
    ``mode=None`` skips these requirements, as tf.estimator. ``export_outputs`` is checked
    and defaulted in PREDICT only. Each side's EstimatorSpec documents its value types.
    """

    __slots__ = ()
    values: ClassVar[SpecValues]

    def __new__(
        cls,
        mode: str | None,
        predictions: object = None,
        loss: object = None,
        train_op: object = None,
        eval_metric_ops: object = None,
        export_outputs: object = None,
        training_chief_hooks: object = None,
        training_hooks: object = None,
        scaffold: object = None,
        evaluation_hooks: object = None,
        prediction_hooks: object = None,
    ) -> Self:
        name, values = cls.__name__, cls.values
        fields = _checked_core(values, name, mode, predictions, loss, train_op, export_outputs)
        return super().__new__(
            cls,
            eval_metric_ops=values.eval_metric_ops(eval_metric_ops, name),
            scaffold=values.scaffold(scaffold, name),
            **_checked_hooks(
                values,
                name,
                training_chief_hooks=training_chief_hooks,
                training_hooks=training_hooks,
                evaluation_hooks=evaluation_hooks,
                prediction_hooks=prediction_hooks,
            ),
            **fields,
        )

    def _replace(self, **kwds: object) -> Self:
        """A copy with fields replaced, validated again as by the constructor.

        Raises:
          ValueError: ``mode`` would change; or as the constructor.
          TypeError: as the constructor.
        """
        return replaced(self, kwds)


class NPUEstimatorSpecBase(EstimatorSpecBase):
    """Ascend's ``NPUEstimatorSpec``: an EstimatorSpec plus ``host_call``, a
    ``(host_fn, tensors)`` pair checked by ``validate_fn_tensors_pair`` (the adapter's
    rules and exception types; no rank rule). Immutable; ``_replace`` keeps
    ``host_call`` (the adapter's loses it). A side's class derives from this and from its
    own EstimatorSpec, in that order."""

    def __new__(
        cls,
        mode: str | None,
        predictions: object = None,
        loss: object = None,
        train_op: object = None,
        eval_metric_ops: object = None,
        export_outputs: object = None,
        training_chief_hooks: object = None,
        training_hooks: object = None,
        scaffold: object = None,
        evaluation_hooks: object = None,
        prediction_hooks: object = None,
        host_call: object = None,
    ) -> Self:
        if host_call is not None:
            host_call = validate_fn_tensors_pair(host_call, "host_call", cls.__name__)
        spec = super().__new__(
            cls,
            mode,
            predictions,
            loss,
            train_op,
            eval_metric_ops,
            export_outputs,
            training_chief_hooks,
            training_hooks,
            scaffold,
            evaluation_hooks,
            prediction_hooks,
        )
        object.__setattr__(spec, "_host_call", host_call)
        return spec

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use _replace({name}=...).")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable.")

    @property
    def host_call(self) -> FnTensors | None:
        """The validated ``(host_fn, tensors)`` pair, or None."""
        return self.__dict__.get("_host_call")

    def _replace(self, **kwds: object) -> Self:
        """A copy with fields replaced and validated again; keeps ``host_call`` unless it
        is replaced.

        Raises:
          ValueError: ``mode`` would change; or as the constructor.
        """
        return replaced(self, kwds, host_call=self.host_call)


class TPUEstimatorSpecBase(
    collections.namedtuple(  # the fields as a literal list, which type checkers read
        "TPUEstimatorSpec",
        [
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
        ],
    )
):
    """``tf.estimator.tpu.TPUEstimatorSpec``'s constructor, over a side's ``values``.

    ``eval_metrics`` and ``host_call`` are ``(fn, tensors)`` pairs checked by
    ``validate_fn_tensors_pair``; ``scaffold_fn`` must be callable (or None); the other
    fields as EstimatorSpec.
    """

    __slots__ = ()
    values: ClassVar[SpecValues]

    def __new__(
        cls,
        mode: str | None,
        predictions: object = None,
        loss: object = None,
        train_op: object = None,
        eval_metrics: object = None,
        export_outputs: object = None,
        scaffold_fn: object = None,
        host_call: object = None,
        training_hooks: object = None,
        evaluation_hooks: object = None,
        prediction_hooks: object = None,
    ) -> Self:
        name, values = cls.__name__, cls.values
        mode = check_mode(mode, name)
        if eval_metrics is not None:
            eval_metrics = validate_fn_tensors_pair(eval_metrics, "eval_metrics", name)
        if host_call is not None:
            host_call = validate_fn_tensors_pair(host_call, "host_call", name)
        hooks = _checked_hooks(
            values,
            name,
            training_hooks=training_hooks,
            evaluation_hooks=evaluation_hooks,
            prediction_hooks=prediction_hooks,
        )
        scaffold_fn = check_scaffold_fn(scaffold_fn, name)
        fields = _checked_core(values, name, mode, predictions, loss, train_op, export_outputs)
        return super().__new__(
            cls, eval_metrics=eval_metrics, scaffold_fn=scaffold_fn, host_call=host_call, **hooks, **fields
        )

    def _replace(self, **kwds: object) -> Self:
        """A copy with fields replaced, validated again; ``mode`` cannot change.

        (TPUEstimator's own ``_replace`` neither re-validates nor protects ``mode``;
        jaxspec treats all three spec classes alike.)

        Raises:
          ValueError / TypeError / RuntimeError: as the constructor, or a mode change.
        """
        return replaced(self, kwds)

    def _estimator_spec(
        self,
        estimator_spec: type[OffTPU],
        eval_metric_ops: object,
        scaffold: object,
        hooks: tuple[object, ...],
    ) -> OffTPU:
        """The side's ``estimator_spec`` with this spec's fields, ``eval_metric_ops`` and
        ``scaffold``, and ``hooks`` (those of host_call) added to all three hook lists:
        the EstimatorSpec TPUEstimator runs off the TPU."""
        return estimator_spec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=eval_metric_ops,
            export_outputs=self.export_outputs,
            scaffold=scaffold,
            training_hooks=self.training_hooks + hooks,
            evaluation_hooks=self.evaluation_hooks + hooks,
            prediction_hooks=self.prediction_hooks + hooks,
        )
