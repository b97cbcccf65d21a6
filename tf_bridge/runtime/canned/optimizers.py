"""Optimizers of the canned estimators: names and instances, as TF 2.15's v2 canned
estimators took them.

TF 2.15's v2 canned estimators train with Keras 2's legacy optimizers
(``tf.keras.optimizers.legacy``, ``OptimizerV2``); on TensorFlow >= 2.16 Keras 2 is the
``tf_keras`` package, so the same classes are ``tf_keras.optimizers.legacy.*``. Their math
and their checkpoint names (``training/Adagrad/<variable>/accumulator``, ...) are the ones a
TF 2.15 model_dir holds.
"""

from __future__ import annotations

import inspect
from typing import Any

# The learning rate for a name whose optimizer has no default one (TF 2.15's rule; all
# five have one today).
FALLBACK_LEARNING_RATE = 0.05


def optimizer_classes() -> dict[str, type]:
    """The optimizer names the canned estimators accept -> their Keras legacy classes."""
    import tf_keras

    legacy = tf_keras.optimizers.legacy
    return {
        "Adagrad": legacy.Adagrad,
        "Adam": legacy.Adam,
        "Ftrl": legacy.Ftrl,
        "RMSProp": legacy.RMSprop,
        "SGD": legacy.SGD,
    }


def _has_default_learning_rate(cls: type) -> bool:
    parameter = inspect.signature(cls.__init__).parameters.get("learning_rate")
    return parameter is not None and parameter.default is not inspect.Parameter.empty


def get_optimizer_instance_v2(opt: Any, learning_rate: float | None = None) -> Any:
    """A ``tf_keras.optimizers.legacy.Optimizer`` for ``opt``.

    Args:
      opt: a name (``'Adagrad'``, ``'Adam'``, ``'Ftrl'``, ``'RMSProp'``, ``'SGD'``), a
        ``tf_keras.optimizers.legacy.Optimizer`` instance (returned as it is), or a
        callable returning one (called now).
      learning_rate: float; used only with a name. None (or 0) gives the optimizer's own
        default learning rate (0.001 for Adagrad, Adam, Ftrl and RMSProp, 0.01 for SGD).

    Returns:
      The optimizer.

    Raises:
      ValueError: an unknown name, or an object that is not a Keras legacy optimizer (a
        Keras 3 ``tf.keras.optimizers`` optimizer or a new-style ``tf_keras`` one included:
        TF 2.15's graph-mode estimators refused those too).
    """
    import tf_keras

    classes = optimizer_classes()
    if isinstance(opt, str):
        if opt not in classes:
            raise ValueError(f"optimizer: unknown name {opt!r}; the names are {tuple(sorted(classes))}.")
        cls = classes[opt]
        if learning_rate:
            return cls(learning_rate=learning_rate)
        if _has_default_learning_rate(cls):
            return cls()
        return cls(learning_rate=FALLBACK_LEARNING_RATE)
    if callable(opt) and not isinstance(opt, tf_keras.optimizers.legacy.Optimizer):
        opt = opt()
    if not isinstance(opt, tf_keras.optimizers.legacy.Optimizer):
        raise ValueError(
            "optimizer must be a name or a tf_keras.optimizers.legacy.Optimizer (the Keras 2 "
            f"optimizers TF 2.15's canned estimators used), got {type(opt).__name__}."
        )
    return opt
