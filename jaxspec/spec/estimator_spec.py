"""EstimatorSpec: what a model_fn returns (``tf.estimator.EstimatorSpec``).

The constructor and the field rules are tf_bridge's too (``jaxspec.rules.spec_classes``,
``jaxspec.rules.spec_fields``); ``JaxSpecValues`` here says what the values are on the
JAX side (arrays, state pytrees, jaxspec's hooks, Scaffold and ExportOutputs), and is
shared with TPUEstimatorSpec and NPUEstimatorSpec.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxspec._checks import is_dense_array, is_number_leaf, is_sparse, type_name
from jaxspec.export.export_output import ExportOutput, PredictOutput
from jaxspec.rules.spec_classes import EstimatorSpecBase, SpecValues
from jaxspec.rules.spec_fields import SERVING_DEFAULT, require_loss, require_train_op
from jaxspec.spec._pytree import register_spec_pytree
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.spec.scaffold import Scaffold

__all__ = ["SERVING_DEFAULT", "EstimatorSpec", "JaxSpecValues"]


class JaxSpecValues(SpecValues):
    """The JAX side's values: dense JAX/numpy arrays, a state pytree as ``train_op``,
    jaxspec's SessionRunHook, Scaffold and ExportOutput classes, metric states."""

    dense_of = (is_dense_array, "a dense JAX or numpy array")
    hooks_of = (SessionRunHook, "SessionRunHook")
    scaffold_of = (Scaffold, "jaxspec.Scaffold")
    outputs_of = (ExportOutput, PredictOutput, "an ExportOutput")

    def loss(self, loss: Any, mode: str | None, cls: str) -> Any:
        """Validate ``loss``; return it as a scalar.

        Required in TRAIN and EVAL. Any shape holding exactly one element (``[]``, ``[1]``,
        ``[1, 1]``) is accepted and reshaped to ``[]``, as tf.estimator does.

        Raises:
          ValueError: missing in TRAIN/EVAL, or more (or fewer) than one element.
          TypeError: not a dense numeric array (a Python float, a sparse array, a string).
        """
        if loss is None:
            require_loss(mode, cls)
            return None
        if not is_dense_array(loss) or np.dtype(loss.dtype).kind not in "biufcV":
            raise TypeError(
                f"{cls}: loss must be a dense numeric JAX or numpy array, got {type_name(loss)}"
                f"{'' if not hasattr(loss, 'dtype') else f' of dtype {loss.dtype}'}."
            )
        if int(np.prod(loss.shape, dtype=np.int64)) != 1:
            raise ValueError(f"{cls}: loss must be a scalar (one element), got shape {tuple(loss.shape)}.")
        return loss if loss.shape == () else loss.reshape(())

    def train_op(self, train_op: Any, mode: str | None, cls: str) -> Any:
        """``train_op`` is the new state pytree; required in TRAIN.

        The spec only checks that it is a pytree of arrays (or numbers); the Estimator checks
        that its tree structure, shapes and dtypes equal those of ``state``.

        Raises:
          ValueError: missing in TRAIN.
          TypeError: a leaf is not an array or a number (a string, an op, ...); the message
            names that leaf.
        """
        if train_op is None:
            require_train_op(mode, cls)
            return None
        leaves, _ = jax.tree_util.tree_flatten_with_path(train_op)
        for path, leaf in leaves:
            if not is_number_leaf(leaf) or is_sparse(leaf):
                where = f"train_op{jax.tree_util.keystr(path)}"
                raise TypeError(
                    f"{cls}: train_op must be the new state, a pytree of arrays; {where} is a {type_name(leaf)}."
                )
        return train_op


class EstimatorSpec(EstimatorSpecBase):
    """What a model_fn returns, as ``tf.estimator.EstimatorSpec``.

    Per mode: TRAIN needs ``loss`` and ``train_op``; EVAL needs ``loss``; PREDICT needs
    ``predictions``. Fields a mode does not use are accepted and ignored. ``mode=None``
    skips the per-mode requirements (tf.estimator accepts it too). JAX differences:
    ``train_op`` is the new state pytree (same tree structure, shapes and dtypes as the
    ``state`` model_fn received; the Estimator checks that, ValueError naming the first
    leaf that differs), and ``eval_metric_ops`` values are metric states from
    ``jaxspec.metrics`` (or ``(value, update)`` tuples / Keras-style metrics). The spec is
    an immutable namedtuple and a JAX pytree whose leaves are its arrays.

    Args:
      mode: a ModeKeys value, or None.
      predictions: array ``[batch, ...]`` or dict of such arrays (``{}`` when None
        outside PREDICT).
      loss: numeric array with one element (``[]``, ``[1]``, ...); stored as ``[]``.
      train_op: the new state pytree (TRAIN).
      eval_metric_ops: dict of metric states or ``(value, update)`` tuples (EVAL).
      export_outputs: dict of name to ExportOutput; checked, defaulted and aliased to
        ``serving_default`` in PREDICT only, as tf.estimator does.
      training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks:
        iterables of SessionRunHook, stored as tuples.
      scaffold: a jaxspec.Scaffold, or None for a default one.

    Raises:
      ValueError: a field the mode requires is missing; loss has more than one element;
        several export heads and no ``serving_default``; an unknown mode.
      TypeError: a field has the wrong type (the message names the field, and the key
        for dict fields).
    """

    __slots__ = ()
    values = JaxSpecValues()


register_spec_pytree(EstimatorSpec, ("predictions", "loss", "train_op", "eval_metric_ops"))
