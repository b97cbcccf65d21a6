"""Conversions between jaxspec's and TensorFlow's export outputs and metric names.

Export outputs: jaxspec's ``ClassificationOutput`` / ``RegressionOutput`` /
``PredictOutput`` hold JAX or numpy arrays (a classification head's string classes as a
static vocabulary or integer ids: JAX has no strings); TensorFlow's hold tensors (string
``classes``). Metric names: evaluate() reports the same names in both worlds (the
``eval_metric_ops`` keys, plus ``loss`` and ``global_step``, which model_fns may not use);
a TRAIN/EVAL SavedModel exposes metric ``name`` as the outputs
``metrics/<name>/value`` and ``metrics/<name>/update_op``, TensorFlow's naming.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeAlias

import numpy as np
import tensorflow as tf
from tensorflow.python.saved_model.model_utils import export_output as tfs

from jaxspec.export import export_output as jx
from jaxspec.spec.fn_types import PyTree

# array -> tensor (``tf.convert_to_tensor``, or a graph constant).
ToTensor: TypeAlias = Callable[[np.ndarray], tf.Tensor]
# tensor, or a structure of them -> numpy (``session.run``, or eager ``.numpy()``).
Fetch: TypeAlias = Callable[[PyTree], PyTree]

RESERVED_METRIC_NAMES = ("loss", "global_step")
_METRICS = "metrics"
_VALUE = "value"
_UPDATE = "update_op"


def _classes_to_tf(
    head: jx.ClassificationOutput, scores: tf.Tensor | None, to_tensor: ToTensor
) -> tf.Tensor | None:
    """A jaxspec head's classes as TF's string tensor: a vocabulary is tiled to
    ``[batch, K]`` (batch from scores; 1 without scores), integer ids become strings."""
    if head.classes is None:
        return None
    vocab = head.class_vocabulary
    if vocab is None:
        return tf.strings.as_string(to_tensor(np.asarray(head.classes)))
    table = tf.constant(np.asarray(vocab).astype(object).reshape(1, -1), dtype=tf.string)
    rows = tf.shape(scores)[0] if scores is not None else 1
    return tf.tile(table, tf.stack([rows, 1]))


class _ToTF:
    """A jaxspec head as TensorFlow's export output of the same kind."""

    def __init__(self, to_tensor: ToTensor) -> None:
        self.to_tensor = to_tensor

    def classification(self, head: jx.ClassificationOutput) -> tfs.ClassificationOutput:
        scores = None if head.scores is None else tf.cast(self.to_tensor(np.asarray(head.scores)), tf.float32)
        return tfs.ClassificationOutput(scores=scores, classes=_classes_to_tf(head, scores, self.to_tensor))

    def regression(self, head: jx.RegressionOutput) -> tfs.RegressionOutput:
        return tfs.RegressionOutput(tf.cast(self.to_tensor(np.asarray(head.value)), tf.float32))

    def predict(self, head: jx.PredictOutput) -> tfs.PredictOutput:
        return tfs.PredictOutput({k: self.to_tensor(np.asarray(v)) for k, v in head.outputs.items()})


def export_outputs_to_tf(
    export_outputs: Mapping[str, jx.ExportOutput], to_tensor: ToTensor = tf.convert_to_tensor
) -> dict[str, tfs.ExportOutput]:
    """jaxspec export outputs → TensorFlow's, head by head, same keys.

    Args:
      export_outputs: dict of key to jaxspec ClassificationOutput / RegressionOutput /
        PredictOutput (arrays ``[batch, ...]``).
      to_tensor: array → tensor (default ``tf.convert_to_tensor``: eager tensors, or
        constants inside a graph).

    Returns:
      dict of key to ``tf_bridge.ClassificationOutput`` (float32 scores, string classes)
      / ``RegressionOutput`` / ``PredictOutput``.

    Raises:
      TypeError: a value is not a jaxspec ExportOutput.
    """
    out: dict[str, tfs.ExportOutput] = {}
    for key, head in export_outputs.items():
        if not isinstance(head, jx.ExportOutput):
            raise TypeError(f"export_outputs[{key!r}] is not a jaxspec ExportOutput: {type(head).__name__}.")
        out[key] = head.accept(_ToTF(to_tensor))
    return out


def _eager_value(tensor: tf.Tensor) -> np.ndarray:
    if not hasattr(tensor, "numpy"):
        raise TypeError(
            "a graph tensor has no value here; pass fetch=session.run (or evaluate the outputs eagerly)."
        )
    return tensor.numpy()


def _classes_from_tf(key: str, classes: np.ndarray) -> list[str]:
    """TF's string classes as a jaxspec vocabulary: every row must name the same classes.

    Raises:
      ValueError: rows differ (per-example strings have no JAX form).
    """
    classes = np.asarray(classes)
    rows = classes.reshape(-1, classes.shape[-1]) if classes.ndim else classes.reshape(1, 1)
    if not (rows == rows[0]).all():
        raise ValueError(
            f"export_outputs[{key!r}]: classes differ between examples; jaxspec keeps string classes only as a "
            "static vocabulary (or integer ids)."
        )
    return [c.decode() if isinstance(c, bytes) else str(c) for c in rows[0]]


def export_outputs_from_tf(
    export_outputs: Mapping[str, tfs.ExportOutput], fetch: Fetch | None = None
) -> dict[str, jx.ExportOutput]:
    """TensorFlow export outputs → jaxspec's (numpy arrays), same keys.

    Args:
      export_outputs: dict of key to TF ClassificationOutput / RegressionOutput /
        PredictOutput.
      fetch: tensor or structure → numpy (e.g. ``session.run``); default: eager ``.numpy()``.

    Raises:
      TypeError: a value is not a TF ExportOutput (Train/Eval outputs have no jaxspec
        form), or graph tensors without ``fetch``.
      ValueError: string classes that vary across examples.
    """
    get = fetch or (lambda t: tf.nest.map_structure(_eager_value, t))
    out: dict[str, jx.ExportOutput] = {}
    for key, head in export_outputs.items():
        convert = next((fn for kind, fn in _FROM_TF if isinstance(head, kind)), None)
        if convert is None:
            raise TypeError(f"export_outputs[{key!r}] has no jaxspec counterpart: {type(head).__name__}.")
        out[key] = convert(key, head, get)
    return out


def _classification_from_tf(key: str, head: tfs.ClassificationOutput, get: Fetch) -> jx.ClassificationOutput:
    scores = None if head.scores is None else np.asarray(get(head.scores))
    classes = None if head.classes is None else _classes_from_tf(key, get(head.classes))
    return jx.ClassificationOutput(scores=scores, classes=classes)


# TensorFlow's kinds (its classes have no visitor), each with its jaxspec conversion.
_FROM_TF: tuple[tuple[type, Callable[[str, tfs.ExportOutput, Fetch], jx.ExportOutput]], ...] = (
    (tfs.ClassificationOutput, _classification_from_tf),
    (tfs.RegressionOutput, lambda key, head, get: jx.RegressionOutput(np.asarray(get(head.value)))),
    (
        tfs.PredictOutput,
        lambda key, head, get: jx.PredictOutput(
            {k: np.asarray(v) for k, v in get(dict(head.outputs)).items()}
        ),
    ),
)


def check_metric_names(names: Iterable[object]) -> list[str]:
    """Metric names valid in both worlds: strings (or tuples of strings, joined by ``/``
    as TF does) other than ``loss`` and ``global_step``.

    Raises:
      ValueError: a reserved name, or a key of another type.
    """
    checked = []
    for name in names:
        if isinstance(name, tuple) and all(isinstance(p, str) for p in name):
            name = "/".join(name)
        if not isinstance(name, str):
            raise ValueError(f"metric names must be strings (or tuples of strings), got {name!r}.")
        if name in RESERVED_METRIC_NAMES:
            raise ValueError(f"metric name {name!r} is reserved: evaluate() reports it itself.")
        checked.append(name)
    return checked


def metric_output_keys(name: str | tuple[str, ...]) -> tuple[str, str]:
    """The SavedModel output keys of metric ``name`` in a TRAIN/EVAL export:
    ``('metrics/<name>/value', 'metrics/<name>/update_op')``; a name that already starts
    with ``metrics`` is not prefixed again (TensorFlow's rule).

    Raises:
      ValueError: as check_metric_names.
    """
    (name,) = check_metric_names([name])
    key = name if name.startswith(_METRICS) else f"{_METRICS}/{name}"
    return f"{key}/{_VALUE}", f"{key}/{_UPDATE}"


def metric_name_from_output_key(key: str) -> tuple[str, str] | None:
    """``(metric name, 'value' | 'update_op')`` for a metric output key of a TRAIN/EVAL
    export, None for other keys (``loss``, ``predictions/...``). The ``metrics/`` prefix is
    removed; a name that itself began with ``metrics`` cannot be told apart."""
    for suffix in (_VALUE, _UPDATE):
        tail = f"/{suffix}"
        if key.startswith(_METRICS) and key.endswith(tail):
            name = key[: -len(tail)]
            if name.startswith(f"{_METRICS}/"):
                name = name[len(_METRICS) + 1 :]
            return name, suffix
    return None


__all__ = [
    "RESERVED_METRIC_NAMES",
    "check_metric_names",
    "export_outputs_from_tf",
    "export_outputs_to_tf",
    "metric_name_from_output_key",
    "metric_output_keys",
]
