"""The predict graph, session and restored variables a tf_bridge Estimator keeps between
``predict`` calls while the checkpoint is unchanged.

tf.estimator rebuilt the graph and restored the checkpoint on every ``predict`` (tens of
milliseconds per call: tensorflow/tensorflow#40454). When an input_fn returns a
``tf.data.Dataset`` of plain tensors and no hooks are given, tf_bridge instead builds
model_fn once on placeholders of the dataset's element shapes and dtypes (the same static
shapes ``get_next()`` would have), restores the checkpoint once, and feeds each batch,
read from the dataset eagerly, to that session. A new checkpoint (another path, or the
same path rewritten), other input shapes or other ``predict_keys`` build a new one;
model_fn ``prediction_hooks`` keep the per-call path. An input_fn whose input cannot be
read this way (not a Dataset, or one that needs a graph) is called once more in the
per-call graph, and only in it from then on.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree
from tf_bridge.export.receivers import split_features_labels


@dataclasses.dataclass(frozen=True)
class Predictor:
    """One built predict graph with its live session.

    Attributes:
      key: what it was built for (checkpoint, its mtime, feature specs, predict_keys).
      graph: the ``tf.Graph``.
      session: a ``tf.compat.v1.Session`` with the checkpoint restored (or the variables
        initialised when there is none).
      inputs: the feature placeholders, in the structure of the dataset's features.
      predictions: what each batch evaluates (model_fn's predictions, ``predict_keys``
        applied).
    """

    key: tuple[Any, ...]
    graph: Any
    session: Any
    inputs: Any
    predictions: Any

    def run(self, features: PyTree) -> PyTree:
        """Evaluate the predictions for one batch of numpy features."""
        feed = dict(zip(tf.nest.flatten(self.inputs), tf.nest.flatten(features), strict=True))
        return self.session.run(self.predictions, feed_dict=feed)


def dataset_features_spec(dataset: tf.data.Dataset) -> PyTree:
    """The features part of a Dataset's element spec, or None when an element is not
    plain tensors (sparse or ragged values, datasets of datasets): those are not cached."""
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) == 2:
        spec = spec[0]
    leaves = tf.nest.flatten(spec)
    if not leaves or not all(type(s) is tf.TensorSpec for s in leaves):
        return None
    return spec


def _read_options() -> tf.data.Options:
    """tf.data options for reading a predict input once, eagerly: no static graph rewrites
    or autotuning (their set-up costs more than a few batches take; the values are the same)."""
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return options


def _elements(dataset: tf.data.Dataset) -> Iterator[PyTree]:
    """The dataset's elements, eagerly. A dataset known to hold one element (the usual
    1-batch predict input) is read without an iterator: ``get_single_element`` costs a
    tenth of creating one (docs/decisions.md, "tf_bridge predict keeps its session")."""
    if int(dataset.cardinality()) == 1:
        yield dataset.get_single_element()
        return
    yield from dataset.with_options(_read_options())


def dataset_features(dataset: tf.data.Dataset) -> Iterator[PyTree]:
    """The dataset's features batch by batch, as numpy (labels dropped), read eagerly."""
    for element in _elements(dataset):
        features, _ = split_features_labels(element) if isinstance(element, tuple) else (element, None)
        yield tf.nest.map_structure(lambda value: value.numpy(), features)


def checkpoint_stamp(checkpoint_path: str | None) -> float | None:
    """The modification time of the checkpoint's index file (None without one)."""
    if not checkpoint_path:
        return None
    try:
        return os.stat(f"{checkpoint_path}.index").st_mtime_ns
    except OSError:
        return None


class PredictCache:
    """The one predictor an Estimator keeps (the last one built); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._predictor: Predictor | None = None
        self._uncacheable: set[Any] = set()  # keys and input_fns that need the per-call path

    @staticmethod
    def key(
        checkpoint_path: str | None, features_spec: PyTree, predict_keys: str | Sequence[str] | None
    ) -> tuple[object, ...]:
        """What a predictor is valid for."""
        keys = None if not predict_keys else tuple(sorted(predict_keys))
        return (checkpoint_path, checkpoint_stamp(checkpoint_path), repr(features_spec), keys)

    def get(self, key: tuple[object, ...]) -> Predictor | None:
        """The kept predictor if it was built for ``key``."""
        with self._lock:
            predictor = self._predictor
        return predictor if predictor is not None and predictor.key == key else None

    def put(self, predictor: Predictor) -> None:
        """Keep ``predictor``, closing the one it replaces."""
        with self._lock:
            old, self._predictor = self._predictor, predictor
        if old is not None and old is not predictor:
            old.session.close()

    def mark_uncacheable(self, key: Hashable) -> None:
        """Remember that a key (model_fn built for it has prediction hooks) or an input_fn
        (its input is not a plain Dataset) needs the per-call path."""
        with self._lock:
            self._uncacheable.add(key)

    def is_uncacheable(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._uncacheable

    def clear(self) -> None:
        """Close and forget the kept session."""
        with self._lock:
            old, self._predictor = self._predictor, None
        if old is not None:
            old.session.close()
