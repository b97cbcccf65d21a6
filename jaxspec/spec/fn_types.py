"""Named types for the functions and hook lists an Estimator takes (the seams between the
user's code, the facades and the loop).

model_fn, input_fn and init_fn are called with the arguments they declare, by name (as
tf.estimator inspects model_fn's and input_fn's signatures), so each is a
``Callable[..., R]``: no single Protocol signature fits every declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from jaxspec.spec.hooks import SessionRunHook

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
