"""Serving input receivers: what a ``serving_input_receiver_fn`` returns.

These follow ``tf.estimator.export.ServingInputReceiver``,
``TensorServingInputReceiver``, ``build_parsing_serving_input_receiver_fn`` and
``build_raw_serving_input_receiver_fn``. The builders' functions create TF1 placeholders,
so they must be called inside a ``tf.compat.v1`` graph (``tf.Graph().as_default()``), as
``tf_bridge.export_saved_model`` does.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any, Protocol, Self, TypeAlias

import numpy as np
import tensorflow as tf

from jaxspec.spec.fn_types import ArrayLike, InputFn, PyTree

# Keys used when a single tensor is given instead of a dict (TF's names).
FEATURE_KEY = "feature"
RECEIVER_KEY = "input"
LABEL_KEY = "label"
EXAMPLES_KEY = "examples"

_TENSOR_TYPES = (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)
# What a receiver holds: a dense, sparse or ragged graph tensor.
GraphTensor: TypeAlias = tf.Tensor | tf.SparseTensor | tf.RaggedTensor


class InputReceiver(Protocol):
    """What an export reads of a receiver fn's result (``ServingInputReceiver``,
    ``TensorServingInputReceiver``, ``SupervisedInputReceiver`` or a look-alike)."""

    @property
    def features(self) -> PyTree: ...

    @property
    def receiver_tensors(self) -> dict[str, tf.Tensor]: ...


# ``build_parsing_serving_input_receiver_fn``'s spec: feature key -> how to parse it.
FeatureSpec: TypeAlias = Mapping[
    str,
    tf.io.FixedLenFeature
    | tf.io.VarLenFeature
    | tf.io.FixedLenSequenceFeature
    | tf.io.SparseFeature
    | tf.io.RaggedFeature,
]


def split_features_labels(result: object) -> tuple[PyTree, PyTree]:
    """``(features, labels)`` from a pair, or ``(result, None)``.

    Raises:
      ValueError: a list or tuple whose length is not 2.
    """
    if isinstance(result, (list, tuple)):
        if len(result) != 2:
            raise ValueError(
                f"input_fn must return features or a (features, labels) pair; got a {type(result).__name__} "
                f"of {len(result)} elements."
            )
        return result[0], result[1]
    return result, None


def _check_tensor(value: object, what: str) -> None:
    """ValueError unless ``value`` is a Tensor, SparseTensor or RaggedTensor (as TF)."""
    if isinstance(value, _TENSOR_TYPES):
        return
    if hasattr(value, "tensor"):  # TF also lets tensor wrappers convertible to a Tensor through.
        try:
            tf.convert_to_tensor(value)
            return
        except (TypeError, ValueError):
            pass
    raise ValueError(
        f"{what} has to be a tf.Tensor, tf.SparseTensor or tf.RaggedTensor; got a {type(value).__name__}."
    )


def _as_tensor_dict(
    value: object, field: str, single_key: str, allow_int_keys: bool = False
) -> dict[str | int, GraphTensor]:
    """Return ``value`` as a dict of tensors (a lone tensor goes under ``single_key``).

    Raises:
      ValueError: ``value`` is None, a key is not a str (or int where allowed), or a value
        is not a tensor. TF raises ValueError for all three.
    """
    if value is None:
        raise ValueError(f"{field} is required but was None.")
    given = value if isinstance(value, Mapping) else {single_key: value}
    out: dict[str | int, GraphTensor] = {}
    for key, tensor in given.items():
        key_ok = isinstance(key, str) or (
            allow_int_keys and isinstance(key, (int, np.integer)) and not isinstance(key, bool)
        )
        if not key_ok:
            kinds = "str or int" if allow_int_keys else "str"
            raise ValueError(f"{field}: every key has to be a {kinds}; got {key!r}.")
        _check_tensor(tensor, f"{field}[{key!r}]")
        out[key] = tensor
    return out


class ServingInputReceiver(
    collections.namedtuple(
        "ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives"]
    )
):
    """What a serving_input_receiver_fn returns (``tf.estimator.export.ServingInputReceiver``).

    Attributes:
      features: dict of str (or int) to ``tf.Tensor`` / ``tf.SparseTensor`` /
        ``tf.RaggedTensor``: what the model receives. A single tensor given here is
        wrapped as ``{'feature': tensor}``, as TF does.
      receiver_tensors: dict of str to tensors fed at serving time (usually one string
        placeholder of serialized ``tf.Example``s). A single tensor is wrapped as
        ``{'input': tensor}``.
      receiver_tensors_alternatives: None, or a dict of str to further groups of receiver
        tensors (each a tensor or a dict, wrapped like ``receiver_tensors``); each group
        yields extra signatures named ``'<group>:<head>'``.

    Raises:
      ValueError: features or receiver_tensors is None, a key has the wrong type, a value
        is not a tensor, or receiver_tensors_alternatives is not a dict (TF's type for
        each of these).
    """

    __slots__ = ()

    def __new__(
        cls,
        features: PyTree,
        receiver_tensors: PyTree,
        receiver_tensors_alternatives: Mapping[str, PyTree] | None = None,
    ) -> Self:
        features = _as_tensor_dict(features, "features", FEATURE_KEY, allow_int_keys=True)
        receiver_tensors = _as_tensor_dict(receiver_tensors, "receiver_tensors", RECEIVER_KEY)
        alternatives = _check_alternatives(receiver_tensors_alternatives)
        return super().__new__(cls, features, receiver_tensors, alternatives)


class TensorServingInputReceiver(
    collections.namedtuple(
        "TensorServingInputReceiver",
        ["features", "receiver_tensors", "receiver_tensors_alternatives"],
    )
):
    """A receiver whose model takes one tensor, not a dict
    (``tf.estimator.export.TensorServingInputReceiver``).

    Attributes:
      features: the single ``tf.Tensor`` / ``tf.SparseTensor`` / ``tf.RaggedTensor``
        given, passed to the model as is.
      receiver_tensors: as in ``ServingInputReceiver`` (always a dict).
      receiver_tensors_alternatives: as in ``ServingInputReceiver``.

    Raises:
      ValueError: features is None or not a single tensor (a dict is refused), or any
        of ``ServingInputReceiver``'s cases.
    """

    __slots__ = ()

    def __new__(
        cls,
        features: PyTree,
        receiver_tensors: PyTree,
        receiver_tensors_alternatives: Mapping[str, PyTree] | None = None,
    ) -> TensorServingInputReceiver:
        if features is None:
            raise ValueError("features is required but was None.")
        _check_tensor(features, "features")
        receiver_tensors = _as_tensor_dict(receiver_tensors, "receiver_tensors", RECEIVER_KEY)
        alternatives = _check_alternatives(receiver_tensors_alternatives)
        return super().__new__(cls, features, receiver_tensors, alternatives)


def _check_alternatives(alternatives: object) -> dict[str, dict[str | int, GraphTensor]] | None:
    """Wrap each group of ``receiver_tensors_alternatives`` into a dict (a new dict)."""
    if alternatives is None:
        return None
    if not isinstance(alternatives, Mapping):
        raise ValueError(
            "receiver_tensors_alternatives has to be a dict of name to receiver tensors; "
            f"got a {type(alternatives).__name__}."
        )
    return {
        name: _as_tensor_dict(group, f"receiver_tensors_alternatives[{name!r}]", RECEIVER_KEY)
        for name, group in alternatives.items()
    }


def build_parsing_serving_input_receiver_fn(
    feature_spec: FeatureSpec, default_batch_size: int | None = None
) -> Callable[[], ServingInputReceiver]:
    """A serving_input_receiver_fn that parses serialized ``tf.Example``s
    (``tf.estimator.export.build_parsing_serving_input_receiver_fn``).

    The returned function, called inside a ``tf.compat.v1`` graph, creates a
    ``tf.string`` placeholder of shape ``[default_batch_size]`` named
    ``input_example_tensor``, parses it with ``tf.io.parse_example(serialized,
    feature_spec)`` and returns ``ServingInputReceiver(parsed, {'examples': serialized})``.

    Args:
      feature_spec: dict of str to ``tf.io.FixedLenFeature`` / ``VarLenFeature`` / ...
        (a ``FixedLenFeature(shape)`` yields a dense ``[batch, *shape]`` tensor; a
        ``VarLenFeature`` a SparseTensor, which ``export_saved_model`` cannot pass to JAX).
      default_batch_size: a static batch size, or None (recommended) for any batch size.

    Returns:
      A function of no arguments returning a ``ServingInputReceiver``.
    """

    def serving_input_receiver_fn() -> ServingInputReceiver:
        serialized = tf.compat.v1.placeholder(
            dtype=tf.string, shape=[default_batch_size], name="input_example_tensor"
        )
        features = tf.io.parse_example(serialized, dict(feature_spec))
        return ServingInputReceiver(features, {EXAMPLES_KEY: serialized})

    return serving_input_receiver_fn


def _placeholder_like(
    value: ArrayLike | tf.Tensor | tf.TensorSpec, key: str | int, default_batch_size: int | None
) -> tf.Tensor:
    """A placeholder with ``value``'s dtype and shape, its first dimension replaced by
    ``default_batch_size`` (a scalar becomes ``[default_batch_size]``, as in TF)."""
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = np.asarray(value)
    dtype = tf.as_dtype(value.dtype)
    shape = tf.TensorShape(value.shape)
    if shape.rank is None:
        raise ValueError(f"features[{key!r}] has an unknown rank; its shape is needed.")
    shape = tf.TensorShape([default_batch_size]).concatenate(shape[1:])
    try:  # A graph tensor lends its op name, as TF does (a TensorSpec its name);
        name = value.op.name  # type: ignore[union-attr]  # anything else gets TF's default, 'Placeholder[_N]'.
    except AttributeError:
        name = getattr(value, "name", None) if isinstance(value, tf.TensorSpec) else None
    return tf.compat.v1.placeholder(dtype=dtype, shape=shape, name=name)


def build_raw_serving_input_receiver_fn(
    features: PyTree, default_batch_size: int | None = None
) -> Callable[[], ServingInputReceiver]:
    """A serving_input_receiver_fn fed the features themselves
    (``tf.estimator.export.build_raw_serving_input_receiver_fn``).

    Args:
      features: dict of str to examples of each feature: ``tf.Tensor``,
        ``tf.TensorSpec``, numpy or JAX arrays (anything with ``shape`` and ``dtype``),
        whose axis 0 is the batch. A single one is accepted too (TF needs a dict) and
        ends up under ``'feature'`` / ``'input'``, as ``ServingInputReceiver`` wraps it.
      default_batch_size: a static batch size, or None (recommended) for any batch size.

    Returns:
      A function that, inside a ``tf.compat.v1`` graph, makes one placeholder per
      feature (its dtype, shape ``[default_batch_size, *shape[1:]]``, named after a graph
      tensor's op or a TensorSpec's name, else ``Placeholder[_N]`` as in TF) and returns ``ServingInputReceiver(placeholders,
      placeholders)``: the receiver tensors are the features.

    Raises:
      ValueError: (when called) a feature has an unknown rank, or a bad key (see
        ``ServingInputReceiver``).
    """

    def serving_input_receiver_fn() -> ServingInputReceiver:
        if isinstance(features, Mapping):
            placeholders: Any = {
                key: _placeholder_like(value, key, default_batch_size) for key, value in features.items()
            }
        else:
            placeholders = _placeholder_like(features, RECEIVER_KEY, default_batch_size)
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


class SupervisedInputReceiver(
    collections.namedtuple("SupervisedInputReceiver", ["features", "labels", "receiver_tensors"])
):
    """What a TRAIN/EVAL input receiver fn returns
    (``tf.estimator.export.SupervisedInputReceiver``).

    Attributes:
      features: a tensor or a dict of str (or int) to tensors, passed to model_fn as is.
      labels: a tensor or a dict of str (or int) to tensors, passed to model_fn as is.
      receiver_tensors: dict of str to tensors fed by the ``train``/``eval`` signature
        (a single tensor is wrapped as ``{'input': tensor}``).

    Raises:
      ValueError: any of the three is None, a key has the wrong type, or a value is not
        a tensor (TF's type for each).
    """

    __slots__ = ()

    def __new__(cls, features: PyTree, labels: PyTree, receiver_tensors: PyTree) -> SupervisedInputReceiver:
        _as_tensor_dict(features, "features", FEATURE_KEY, allow_int_keys=True)
        _as_tensor_dict(labels, "labels", LABEL_KEY, allow_int_keys=True)
        receiver_tensors = _as_tensor_dict(receiver_tensors, "receiver_tensors", RECEIVER_KEY)
        return super().__new__(cls, features, labels, receiver_tensors)


class UnsupervisedInputReceiver(ServingInputReceiver):
    """A TRAIN/EVAL receiver without labels (``tf.estimator.export.UnsupervisedInputReceiver``):
    a ``ServingInputReceiver`` without alternatives."""

    __slots__ = ()

    def __new__(cls, features: PyTree, receiver_tensors: PyTree) -> UnsupervisedInputReceiver:
        return super().__new__(cls, features, receiver_tensors, None)


def _placeholders(
    value: PyTree, single_key: str, default_batch_size: int | None
) -> tuple[PyTree, dict[str, tf.Tensor]]:
    """Placeholders like ``value`` (a dict or one tensor), and the receiver-tensor dict
    naming them (a single one under ``single_key``)."""
    if isinstance(value, Mapping):
        made = {key: _placeholder_like(v, key, default_batch_size) for key, v in value.items()}
        return made, dict(made)
    made = _placeholder_like(value, single_key, default_batch_size)
    return made, {single_key: made}


def build_raw_supervised_input_receiver_fn(
    features: PyTree, labels: PyTree, default_batch_size: int | None = None
) -> Callable[[], SupervisedInputReceiver]:
    """A TRAIN/EVAL input receiver fn fed features and labels as model_fn takes them
    (``tf.estimator.experimental.build_raw_supervised_input_receiver_fn``).

    Args:
      features: a dict of str to examples of each feature, or one example (anything
        with ``shape`` and ``dtype``: tf.Tensor, tf.TensorSpec, numpy/JAX arrays), axis 0
        the batch.
      labels: the same for the labels.
      default_batch_size: a static batch size, or None (recommended) for any batch size.

    Returns:
      A function that, inside a ``tf.compat.v1`` graph, makes a placeholder per tensor
      (as ``build_raw_serving_input_receiver_fn``) and returns
      ``SupervisedInputReceiver(features, labels, receiver_tensors)``; the receiver
      tensors are the feature keys (``'input'`` for a single tensor) plus the label keys
      (``'label'`` for a single tensor).

    Raises:
      ValueError: features and labels share a key, or labels is None.
    """
    if labels is None:
        raise ValueError("labels is required for a supervised input receiver; got None.")
    feature_keys = set(features) if isinstance(features, Mapping) else {RECEIVER_KEY}
    label_keys = set(labels) if isinstance(labels, Mapping) else {LABEL_KEY}
    if feature_keys & label_keys:
        raise ValueError(
            f"features and labels need distinct keys; both have {sorted(feature_keys & label_keys)}."
        )

    def supervised_input_receiver_fn() -> SupervisedInputReceiver:
        made_features, feature_tensors = _placeholders(features, RECEIVER_KEY, default_batch_size)
        made_labels, label_tensors = _placeholders(labels, LABEL_KEY, default_batch_size)
        return SupervisedInputReceiver(made_features, made_labels, {**feature_tensors, **label_tensors})

    return supervised_input_receiver_fn


def _is_part(value: object) -> bool:
    """A features or labels value: a tensor, an array, a TensorSpec or a dict of them."""
    return isinstance(value, Mapping) or (hasattr(value, "shape") and hasattr(value, "dtype"))


def _iterator_specs(dataset: tf.data.Dataset) -> PyTree:
    """A dataset's element as TensorSpecs named like the tensors its iterator gives
    (``IteratorGetNext``), for a dataset made outside the graph being built."""
    return tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape, s.dtype, name="IteratorGetNext"), dataset.element_spec
    )


def _features_and_labels(result: object) -> tuple[PyTree, PyTree]:
    """``(features, labels)`` from what input_fn returned, read as tf.estimator reads it
    (a Dataset's ``get_next()``, a ``(features, labels)`` pair, or features alone); an
    iterable of such batches (jaxspec's input_fns) gives its first batch.

    Raises:
      ValueError: a pair of more or fewer than two parts, or no data.
    """
    if isinstance(result, tf.data.Dataset):
        try:
            result = tf.compat.v1.data.make_initializable_iterator(result).get_next()
        except ValueError:  # made in another graph: its element spec has what is needed
            result = _iterator_specs(result)
        return split_features_labels(result)
    if _is_part(result):
        return result, None
    if isinstance(result, (tuple, list)) and all(_is_part(part) for part in result):
        return split_features_labels(result)
    if isinstance(result, tuple) or not hasattr(result, "__iter__"):
        return split_features_labels(result)
    for batch in result:
        return _features_and_labels(batch)
    raise ValueError("input_fn gave no data to take the features' and labels' shapes from.")


def build_supervised_input_receiver_fn_from_input_fn(
    input_fn: InputFn, **input_fn_args: object
) -> Callable[[], SupervisedInputReceiver]:
    """A TRAIN/EVAL input receiver fn shaped like what ``input_fn`` gives (TF's
    ``build_supervised_input_receiver_fn_from_input_fn``).

    ``input_fn(**input_fn_args)`` is called once, now, in a fresh ``tf.Graph`` (as TF
    does, so its ops never enter the caller's graph), and read as tf.estimator reads
    it: a ``tf.data.Dataset`` (its iterator's ``get_next()``; a dataset built outside
    input_fn is read from its element spec), a ``(features, labels)`` pair of tensors or
    arrays, or features alone; beyond TF, an iterable of such batches (jaxspec's
    input_fns) gives its first one. Placeholders follow the dtypes and shapes, axis 0
    unknown (see ``build_raw_supervised_input_receiver_fn``), and are named after the
    tensors' ops as TF names them (``IteratorGetNext[_N]`` for a dataset); an array
    gives TF's default ``Placeholder[_N]``.

    Returns:
      A no-argument function returning a ``SupervisedInputReceiver``, for
      ``experimental_export_all_saved_models`` / ``export_saved_model(...,
      experimental_mode=TRAIN or EVAL)``.

    Raises:
      ValueError: input_fn gives features only (a supervised receiver needs labels), no
        data, a tuple of other than two parts, or features and labels sharing a key.
    """
    with tf.Graph().as_default():
        features, labels = _features_and_labels(input_fn(**input_fn_args))
    # The placeholders are made later, in the graph the receiver fn is called in.
    return build_raw_supervised_input_receiver_fn(features, labels)
