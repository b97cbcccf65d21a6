"""The optimizers of TF 2.15's v1 canned estimators: ``tf.compat.v1.train`` optimizers.

TF 2.15's v1 classes (``tf.compat.v1.estimator.DNNClassifier``, ...) trained with TF1's
optimizers, which name an optimizer slot after the variable: ``<variable>/Adagrad``,
``<variable>/Ftrl`` and ``<variable>/Ftrl_1`` (Ftrl's accumulator and linear term). The
same classes are ``tf.compat.v1.train.*`` on TensorFlow >= 2.16, so a v1 model_dir's slots
are read and written under TF 2.15's names.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def optimizer_classes() -> dict[str, type]:
    """The optimizer names the v1 canned estimators accept -> ``tf.compat.v1.train`` classes."""
    train = tf.compat.v1.train
    return {
        "Adagrad": train.AdagradOptimizer,
        "Adam": train.AdamOptimizer,
        "Ftrl": train.FtrlOptimizer,
        "RMSProp": train.RMSPropOptimizer,
        "SGD": train.GradientDescentOptimizer,
    }


def get_optimizer_instance(opt: Any, learning_rate: float | None = None) -> Any:
    """A ``tf.compat.v1.train.Optimizer`` for ``opt`` (TF 2.15's
    ``optimizers.get_optimizer_instance``, the v1 canned estimators' rule).

    Args:
      opt: a name (``'Adagrad'``, ``'Adam'``, ``'Ftrl'``, ``'RMSProp'``, ``'SGD'``), a
        ``tf.compat.v1.train.Optimizer`` (returned as it is) or a callable returning one
        (called now).
      learning_rate: float, the learning rate of an optimizer given by name (the canned
        estimator's default, e.g. 0.05 for the DNN); required with a name.

    Returns:
      The optimizer.

    Raises:
      ValueError: an unknown name; a name without ``learning_rate``; an object that is not
        a ``tf.compat.v1.train.Optimizer`` (a Keras optimizer included: TF 2.15's v1 classes
        refused those too).
    """
    classes = optimizer_classes()
    if isinstance(opt, str):
        if opt not in classes:
            raise ValueError(f"optimizer: unknown name {opt!r}; the names are {tuple(sorted(classes))}.")
        if not learning_rate:
            raise ValueError(f"optimizer {opt!r} is a name: learning_rate must be given with it.")
        return classes[opt](learning_rate=learning_rate)
    if callable(opt) and not isinstance(opt, tf.compat.v1.train.Optimizer):
        opt = opt()
    if not isinstance(opt, tf.compat.v1.train.Optimizer):
        raise ValueError(
            "optimizer of a v1 canned estimator must be a name or a tf.compat.v1.train.Optimizer "
            f"(TF1's optimizers, as TF 2.15's v1 classes took), got {type(opt).__name__}."
        )
    return opt
