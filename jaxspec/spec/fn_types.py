"""Named types for the values, functions and hook lists an Estimator takes (the seams
between the user's code, the facades and the loop).

model_fn, input_fn and init_fn are called with the arguments they declare, by name (as
tf.estimator inspects model_fn's and input_fn's signatures), so each is a
``Callable[..., R]``: no single Protocol signature fits every declaration.

The value aliases follow optax's ``PyTree``/``Params``: names a reader can follow, which a
type checker reads as ``Any`` (a pytree's structure is the user's choice, and JAX
arrays, tracers and numpy arrays all stand in its leaves). Arrays are JAX's own types,
as CLU and flax name them: ``Array`` (``jax.Array``: what a function returns or keeps)
and ``ArrayLike`` (``jax.typing.ArrayLike``: what it accepts: JAX or numpy arrays, numpy
and Python scalars).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from jax import Array as Array
from jax.typing import ArrayLike as ArrayLike

from jaxspec.spec.hooks import SessionRunHook

# A JAX pytree: nested dicts, lists, tuples, namedtuples or registered classes (flax
# structs, dataclasses) whose leaves are arrays (jax.Array, numpy, Python scalars).
PyTree: TypeAlias = Any
# The train state: the pytree init_fn returns, model_fn receives as ``state`` and replaces
# through ``train_op`` (same structure and dtypes), checkpoints save (a flax TrainState,
# a params dict, ...).
State: TypeAlias = PyTree
# One batch of features: an array or a dict of arrays, batch on axis 0 (input_fn's first
# element, model_fn's ``features``).
Features: TypeAlias = PyTree
# One batch of labels: an array, a dict of arrays, or None (PREDICT, or an input_fn that
# gives features only).
Labels: TypeAlias = PyTree

# ``input_fn(mode?, params?, config?)``: a ``tf.data.Dataset`` or an iterable of
# ``(features, labels)`` batches (TRAIN/EVAL) or of features (PREDICT).
InputFn: TypeAlias = Callable[..., Any]
# ``model_fn(features, labels?, mode?, params?, config?, state?, rng?, global_step?)``:
# an EstimatorSpec, TPUEstimatorSpec or NPUEstimatorSpec.
ModelFn: TypeAlias = Callable[..., Any]
# ``init_fn(rng?, features?, labels?, params?, config?)``: the first state pytree.
InitFn: TypeAlias = Callable[..., Any]
# The ``hooks`` argument of train/evaluate/predict: SessionRunHooks, or None.
Hooks: TypeAlias = Iterable[SessionRunHook] | None
