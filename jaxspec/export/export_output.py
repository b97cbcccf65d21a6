"""ExportOutput classes: what one SavedModel signature returns.

They follow ``tf.estimator.export.ClassificationOutput``, ``RegressionOutput`` and
``PredictOutput``; the values are JAX arrays computed by model_fn in PREDICT. JAX has no
string dtype, so a ClassificationOutput's string ``classes`` are given either as a static
vocabulary (numpy/list of str) or as integer class ids; ``tf_bridge`` turns both into the
string tensor TF Serving expects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeAlias, TypeVar, cast

import numpy as np
from jax import Array

from jaxspec._checks import is_array, is_floating, is_string_array, type_name

_R = TypeVar("_R")
_R_co = TypeVar("_R_co", covariant=True)


# An export output's values: JAX arrays (traced while exporting) or numpy arrays, batch on
# axis 0 (Python scalars are refused, as TF refuses non-tensors).
Arrays: TypeAlias = Array | np.ndarray


class ExportOutputVisitor(Protocol[_R_co]):
    """What one export step does with each kind of export output: the SavedModel's
    signature tensors and SignatureDef (``tf_bridge.export``), the jax.export artifact's
    rules (``jaxspec.export.serving``), the conversion to TF's classes. A kind calls its
    own method (``ExportOutput.accept``), so a new kind is one new method here and one
    class, not a branch in every module that exports."""

    def classification(self, head: ClassificationOutput) -> _R_co: ...

    def regression(self, head: RegressionOutput) -> _R_co: ...

    def predict(self, head: PredictOutput) -> _R_co: ...


class ExportOutput:
    """Base class of the three export outputs (``tf.estimator.export.ExportOutput``).

    A kind answers for itself: ``method_name`` (the SignatureDef's method), ``kind``
    (its name in messages: ``'classification'``, ``'regression'``, ``'predict'``), whether its
    signature takes serialized ``tf.Example``s (``takes_examples``: classify and regress
    do, as TF Serving's Classify/Regress APIs), which outputs are served as float32
    (``float32_keys``), and ``accept(visitor)``, which calls the visitor's method for
    the kind (TF's ``as_signature_def`` does the same work in one method per class)."""

    method_name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    takes_examples: ClassVar[bool] = False
    float32_keys: ClassVar[tuple[str, ...]] = ()

    def tensors(self) -> dict[str, Arrays]:
        """The arrays this head outputs, by signature output key."""
        raise NotImplementedError

    def accept(self, visitor: ExportOutputVisitor[_R]) -> _R:
        """``visitor.<kind>(self)``: the visitor's method for this kind of output."""
        raise NotImplementedError


class ClassificationOutput(ExportOutput):
    """A classification head: ``tensorflow/serving/classify`` (signature keys ``scores``,
    ``classes``), as ``tf.estimator.export.ClassificationOutput``.

    Args:
      scores: float array ``[batch, num_classes]``, or None.
      classes: None; or the class names as a static vocabulary, a list or numpy array of
        str of shape ``[num_classes]`` (tiled to ``[batch, num_classes]`` at export, as TF's
        canned heads do); or integer class ids ``[batch]`` / ``[batch, k]`` (turned into
        strings at export). TF takes a string tensor; JAX has none, hence the two forms.

    Raises:
      ValueError: both are None, scores is not a float array, or classes is neither a
        string vocabulary nor an integer array (the types TF raises for the same cases).
    """

    method_name: ClassVar[str] = "tensorflow/serving/classify"
    kind: ClassVar[str] = "classification"
    takes_examples: ClassVar[bool] = True
    float32_keys: ClassVar[tuple[str, ...]] = ("scores",)

    def __init__(self, scores: Arrays | None = None, classes: Arrays | Sequence[str] | None = None) -> None:
        if scores is None and classes is None:
            raise ValueError("ClassificationOutput: at least one of scores and classes is required.")
        if scores is not None and not (is_array(scores) and is_floating(scores)):
            raise ValueError(
                "ClassificationOutput: scores must be a float array, got "
                f"{getattr(scores, 'dtype', type_name(scores))}."
            )
        if classes is not None:
            if is_string_array(classes):
                classes = np.asarray(classes).astype(str)
            elif not (is_array(classes) and np.issubdtype(np.dtype(cast(Arrays, classes).dtype), np.integer)):
                raise ValueError(
                    "ClassificationOutput: classes must be a vocabulary of strings or an "
                    f"integer array of class ids, got {getattr(classes, 'dtype', type_name(classes))}."
                )
        self._scores = scores
        self._classes = cast("Arrays | None", classes)  # a vocabulary is a numpy array now

    @property
    def scores(self) -> Arrays | None:
        """The float scores array, or None."""
        return self._scores

    @property
    def classes(self) -> Arrays | None:
        """The string vocabulary (numpy), the integer class-id array, or None."""
        return self._classes

    @property
    def class_vocabulary(self) -> np.ndarray | None:
        """The static string vocabulary when classes were given as strings, else None."""
        return cast(np.ndarray, self._classes) if is_string_array(self._classes) else None

    def tensors(self) -> dict[str, Arrays]:
        """``scores`` and integer ``classes`` (a string vocabulary is not an array)."""
        out: dict[str, Arrays] = {}
        if self._scores is not None:
            out["scores"] = self._scores
        if self._classes is not None and self.class_vocabulary is None:
            out["classes"] = self._classes
        return out

    def accept(self, visitor: ExportOutputVisitor[_R]) -> _R:
        """``visitor.classification(self)``."""
        return visitor.classification(self)


class RegressionOutput(ExportOutput):
    """A regression head: ``tensorflow/serving/regress`` (output key ``outputs``), as
    ``tf.estimator.export.RegressionOutput``.

    Args:
      value: float array ``[batch]`` or ``[batch, 1]``.

    Raises:
      ValueError: value is not a float array.
    """

    method_name: ClassVar[str] = "tensorflow/serving/regress"
    kind: ClassVar[str] = "regression"
    takes_examples: ClassVar[bool] = True
    float32_keys: ClassVar[tuple[str, ...]] = ("outputs",)

    def __init__(self, value: Arrays) -> None:
        if not (is_array(value) and is_floating(value)):
            raise ValueError(
                "RegressionOutput: value must be a float array, got "
                f"{getattr(value, 'dtype', type_name(value))}."
            )
        self._value = value

    @property
    def value(self) -> Arrays:
        """The regression value array."""
        return self._value

    def tensors(self) -> dict[str, Arrays]:
        """``{'outputs': value}``."""
        return {"outputs": self._value}

    def accept(self, visitor: ExportOutputVisitor[_R]) -> _R:
        """``visitor.regression(self)``."""
        return visitor.regression(self)


class PredictOutput(ExportOutput):
    """A generic head: ``tensorflow/serving/predict``, as ``tf.estimator.export.PredictOutput``.

    Args:
      outputs: an array (exported under the key ``output``) or a dict of str to arrays,
        each with the batch on axis 0. A tuple of strings as a key (a multi-head name)
        becomes the strings joined by ``/``, as in TF.

    Raises:
      ValueError: a key is not a string (or tuple of strings) or a value is not an array
        (TF's types); the message names the key.
    """

    method_name: ClassVar[str] = "tensorflow/serving/predict"
    kind: ClassVar[str] = "predict"
    DEFAULT_KEY: ClassVar[str] = "output"
    SEPARATOR: ClassVar[str] = "/"

    def __init__(self, outputs: Arrays | Mapping[str, Arrays] | Mapping[tuple[str, ...], Arrays]) -> None:
        given: dict[Any, Any] = (
            outputs if isinstance(outputs, dict) else {self.DEFAULT_KEY: outputs}
        )  # unchecked
        checked: dict[str, Arrays] = {}
        for key, value in given.items():
            if isinstance(key, tuple) and all(isinstance(k, str) for k in key):
                key = self.SEPARATOR.join(key)
            if not isinstance(key, str):
                raise ValueError(f"PredictOutput: output keys must be strings, got {key!r}.")
            if not is_array(value):
                raise ValueError(f"PredictOutput: output {key!r} must be an array, got {type_name(value)}.")
            checked[key] = value
        self._outputs = checked

    @property
    def outputs(self) -> dict[str, Arrays]:
        """The dict of output arrays."""
        return self._outputs

    def tensors(self) -> dict[str, Arrays]:
        """The outputs dict."""
        return dict(self._outputs)

    def accept(self, visitor: ExportOutputVisitor[_R]) -> _R:
        """``visitor.predict(self)``."""
        return visitor.predict(self)
