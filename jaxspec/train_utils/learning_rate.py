"""The learning rate an optimizer state holds, for the ``learning_rate`` summary.

``optax.inject_hyperparams`` keeps each hyperparameter's latest value in its state's
``hyperparams``: after an update it holds the value that update used (a schedule's value
at the update's count). A JAX addition; TF wrote the summary only where the model_fn
asked for it (``tf.compat.v1.summary.scalar('learning_rate', lr)``), with the same
meaning: at global step s, the rate the update reaching s used.
"""

from __future__ import annotations

import jax
import optax

from jaxspec.spec.fn_types import Array, PyTree

_INJECTED = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)


def find_learning_rate(tree: PyTree) -> Array | None:
    """The ``learning_rate`` of the first ``optax.inject_hyperparams`` state in ``tree``
    (an optimizer state or a whole train state, searched however deep), or None when
    none holds one. Returns its value as held (a scalar array)."""
    for leaf in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, _INJECTED)):
        if isinstance(leaf, _INJECTED) and "learning_rate" in leaf.hyperparams:
            return leaf.hyperparams["learning_rate"]
    return None
