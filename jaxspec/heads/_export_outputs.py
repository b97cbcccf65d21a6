"""The PREDICT export output of the classification heads: class ids that TF's signature
gives as class names.

TF 2.15's heads put string class names in the predict signature (``classes``,
``all_classes``: the label_vocabulary's entries, or ``'0'``, ``'1'``, ... without one);
JAX arrays hold no strings, so the heads give int32 class ids and name, per output, the
strings they stand for. ``tf_bridge`` turns those outputs into TF's string tensors when it
writes the SavedModel (``tf_bridge.export.signatures``); jaxspec's own predictions keep the ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jaxspec.export import ClassificationOutput, ExportOutput, PredictOutput
from jaxspec.export.export_output import Arrays
from jaxspec.rules.head_keys import (
    CLASSIFY_SERVING_KEY,
    DEFAULT_SERVING_KEY,
    PREDICT_SERVING_KEY,
    PredictionKeys,
)
from jaxspec.spec.fn_types import Array


class ClassNamesPredictOutput(PredictOutput):
    """A ``PredictOutput`` some of whose outputs are int class ids standing for names.

    Args:
      outputs: dict of str to arrays ``[batch, ...]``, as ``PredictOutput``.
      class_names: dict of output key to the class names (a sequence of str, entry ``i``
        the name of id ``i``); keys not in ``outputs`` are left out (a head asked for
        fewer prediction keys).

    Raises:
      ValueError: as ``PredictOutput``; or a class-names entry that is not a 1-D
        sequence of str (naming the key).
    """

    def __init__(
        self, outputs: Mapping[str, Arrays], class_names: Mapping[str, Sequence[str] | np.ndarray]
    ) -> None:
        super().__init__(outputs)
        names: dict[str, np.ndarray] = {}
        for key, value in class_names.items():
            array = np.asarray(value)
            if array.ndim != 1 or not all(isinstance(v, str) for v in value):
                raise ValueError(f"class_names[{key!r}] has to be a 1-D sequence of str; got {value!r}.")
            if key in self.outputs:
                names[key] = array.astype(str)
        self._class_names = names

    @property
    def class_names(self) -> dict[str, np.ndarray]:
        """Output key -> the names of its class ids (numpy str ``[num_classes]``)."""
        return dict(self._class_names)


def prefixed_class_names(output: ExportOutput, prefix: str) -> dict[str, np.ndarray]:
    """``output``'s class names (none for a plain PredictOutput) under ``prefix/key``, as
    MultiHead merges its heads' predict outputs."""
    names = getattr(output, "class_names", {})
    return {f"{prefix}/{key}": value for key, value in names.items()}


def classifier_exports(
    predictions: dict[str, Array], class_names: np.ndarray, named_keys: Sequence[str]
) -> dict[str, ExportOutput]:
    """A classification head's PREDICT export outputs, as tf.estimator 2.15's:
    ``serving_default`` and ``classification`` (a ClassificationOutput of the
    ``probabilities`` ``[batch, n_classes]`` and the ``class_names``) and ``predict``
    (every prediction; the outputs ``named_keys`` hold class ids that stand for
    ``class_names``)."""
    classifier = ClassificationOutput(scores=predictions[PredictionKeys.PROBABILITIES], classes=class_names)
    return {
        DEFAULT_SERVING_KEY: classifier,
        CLASSIFY_SERVING_KEY: classifier,
        PREDICT_SERVING_KEY: ClassNamesPredictOutput(predictions, dict.fromkeys(named_keys, class_names)),
    }
