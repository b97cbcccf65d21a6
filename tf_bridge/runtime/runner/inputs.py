"""input_fn / model_fn plumbing of the TensorFlow runner, as tf.estimator does it.

input_fn gets ``mode``/``params``/``config`` if it declares them, and returns a
``tf.data.Dataset`` (an initializable iterator is made, initialised by a hook after the
session exists), a ``(features, labels)`` pair, or features alone. model_fn gets
``features`` and whichever of ``labels, mode, params, config`` it declares.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import tensorflow as tf

from jaxspec._fn_args import fn_arg_names
from jaxspec.rules import model_fn as rules_model_fn
from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.export.receivers import split_features_labels

if TYPE_CHECKING:
    from tf_bridge.runtime.run_config import RunConfig

# The spec classes an Estimator accepts from model_fn.
Spec = TypeVar("Spec")

_log = logging.getLogger("tf_bridge")

MODEL_FN_ARGS = ("features", "labels", "mode", "params", "config")


def verify_model_fn_args(
    model_fn: Callable[..., object], params: Mapping[str, object] | None
) -> tuple[str, ...]:
    """Check model_fn's declared arguments as tf.estimator does, against ``features,
    labels, mode, params, config`` (``jaxspec.rules.model_fn.verify_model_fn_args``; the
    warning goes to the ``tf_bridge`` logger).

    Raises:
      ValueError: see ``jaxspec.rules.model_fn.verify_model_fn_args``.
    """
    return rules_model_fn.verify_model_fn_args(model_fn, params, MODEL_FN_ARGS, _log)


class DatasetInitializerHook(tf.compat.v1.train.SessionRunHook):
    """Runs an initializable iterator's initializer once the session exists."""

    def __init__(self, iterator: tf.compat.v1.data.Iterator) -> None:
        self._iterator = iterator
        self._initializer: Any = None

    def begin(self) -> None:
        self._initializer = self._iterator.initializer

    def after_create_session(self, session: tf.compat.v1.Session, coord: tf.train.Coordinator) -> None:
        session.run(self._initializer)


def parse_input_fn_result(result: object) -> tuple[PyTree, PyTree, list[tf.compat.v1.train.SessionRunHook]]:
    """(features, labels, hooks) from what input_fn returned; a Dataset gets an
    initializable iterator whose ``get_next()`` is split, and a hook initialising it."""
    hooks: list[Any] = []
    if isinstance(result, tf.data.Dataset):
        iterator = tf.compat.v1.data.make_initializable_iterator(result)
        hooks.append(DatasetInitializerHook(iterator))
        result = iterator.get_next()
    features, labels = split_features_labels(result)
    return features, labels, hooks


def call_input_fn(input_fn: InputFn, mode: str, params: Mapping[str, Any], config: RunConfig) -> object:
    """Call ``input_fn`` with the declared ``mode``/``params``/``config``, on the CPU."""
    names = fn_arg_names(input_fn)
    available = {"mode": mode, "params": params, "config": config}
    kwargs = {name: available[name] for name in names if name in available}
    with tf.compat.v1.device("/cpu:0"):
        return input_fn(**kwargs)


# TensorFlow's message when a tf.compat.v1.layers layer meets Keras 3.
KERAS_3_MARK = "is not available with Keras 3"


def keras_2_hint() -> str:
    """What to do when a model_fn's ``tf.compat.v1.layers`` need Keras 2: tf_bridge never
    switches Keras itself, since that would change the program's other Keras code."""
    try:
        import tf_keras  # noqa: F401  (only asked whether it is installed)
    except ImportError:
        install = "install tf_keras (pip install 'jaxspec[tf]' brings it), then "
    else:
        install = ""
    return (
        "tf.compat.v1.layers need Keras 2 on TensorFlow >= 2.16: "
        f"{install}set the environment variable TF_USE_LEGACY_KERAS=1 before TensorFlow is imported "
        "(this switches the whole program's tf.keras to Keras 2)."
    )


def call_model_fn(
    model_fn: Callable[..., object],
    features: PyTree,
    labels: PyTree,
    mode: str,
    params: Mapping[str, Any],
    config: RunConfig,
    spec_types: tuple[type[Spec], ...],
) -> Spec:
    """Call model_fn as tf.estimator does and check what it returns.

    Raises:
      ValueError: labels exist but model_fn takes none, or model_fn returned something
        other than one of ``spec_types``.
      AttributeError: model_fn used a ``tf.compat.v1.layers`` layer, which needs Keras 2
        (tf_keras) while Keras 3 is active (see ``keras_2_hint``).
    """
    names = fn_arg_names(model_fn)
    kwargs: dict[str, Any] = {}
    if "labels" in names:
        kwargs["labels"] = labels
    elif labels is not None:
        raise ValueError("input_fn returned labels, but model_fn takes no argument named 'labels'.")
    for name, value in (("mode", mode), ("params", params), ("config", config)):
        if name in names:
            kwargs[name] = value
    _log.info("Calling model_fn (%s).", mode)
    try:
        spec = model_fn(features=features, **kwargs)
    except AttributeError as err:
        if KERAS_3_MARK not in str(err):
            raise
        raise AttributeError(f"{err} {keras_2_hint()}") from err
    if not isinstance(spec, spec_types):
        wanted = " or ".join(t.__name__ for t in spec_types)
        raise ValueError(f"model_fn must return a tf_bridge {wanted}; it returned a {type(spec).__name__}.")
    return spec


def has_dataset_or_queue(features: PyTree) -> bool:
    """Whether the features come from a dataset iterator or a queue runner (otherwise
    predict would never end; tf.estimator warns about it)."""
    tensors = [t for t in tf.nest.flatten(features) if isinstance(t, tf.Tensor)]
    if any(t.op.type == "IteratorGetNext" for t in tensors):
        return True
    return bool(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS))
