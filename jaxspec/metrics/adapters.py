"""Other metric forms as mergeable states: ``(value, update)`` pairs and Keras metrics.

``as_metric_state`` (here) reads pairs and Keras-style objects as states. Keras is imported
lazily, only when a Keras metric is wrapped; ``import jaxspec`` never imports it.

Keras metrics: Keras 3 with the JAX backend has a stateless API
(``stateless_update_state(variables, ...)`` and ``stateless_result(variables)``), so a
Keras metric's variables can be carried as a jaxspec state and its ``result`` computed
once from the merged variables. Two ways in:

* ``keras_metric(metric, *args, **kwargs)``: the batch's variables are
  ``metric.stateless_update_state(zeros, *args, **kwargs)``; the padding mask is folded
  into ``sample_weight``, so padded rows never count. The metric object is not mutated.
* a Keras metric that model_fn / metric_fn created and updated itself (``m.update_state(
  y, p)``, then ``eval_metric_ops={'m': m}``): its variables hold this batch's
  statistics (as tracers) and become the state. jaxspec cannot take padded rows back out
  of such an update: the state records how many padded rows the batch had, and the value
  is refused if there were any (see ``KerasMetric.compute``). Use ``keras_metric`` where a
  final batch may be padded (on the mesh, when the data do not fill the last step).

Merging adds the variables leaf by leaf. That is right for metrics whose variables are
running sums starting at zero, which is how Keras builds its metrics (Mean, Sum, the
MeanMetricWrapper family such as accuracies and losses, AUC, Precision, Recall, the
confusion counts, IoU); a metric whose fresh variables are not all zero is rejected with
TypeError, and a metric whose variables are sums of another kind (a running max, say)
would be merged wrongly: do not use one.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxspec.metrics.base import Metric, MetricState, active_padding_mask, is_concrete, is_metric_state
from jaxspec.spec.fn_types import ArrayLike, PyTree

if TYPE_CHECKING:
    import keras


# -- (value, update) pairs ---------------------------------------------------------------------
class PairMetric(Metric):
    """A metric state whose value is read by a function of the merged state.

    ``state`` is the wrapped metric state; ``value_fn(merged_state)`` replaces its
    ``compute()``. ``merge`` merges the wrapped states (the function is kept from the
    left-hand side), so a function re-created on each trace does not break merging.
    """

    state: MetricState
    value_fn: Callable[[MetricState], PyTree] = struct.field(pytree_node=False)

    def merge(self, other: PairMetric) -> PairMetric:
        return self.replace(state=self.state.merge(other.state))

    def empty(self) -> PairMetric:
        # A duck state (merge/compute only) has no empty(): the gap is_metric_state leaves.
        return self.replace(state=self.state.empty())  # type: ignore[attr-defined]

    def compute(self) -> PyTree:
        return self.value_fn(self.state)


def from_pair(pair: tuple[object, object], name: str) -> MetricState:
    """Read a ``(value, update)`` pair as a state; see ``as_metric_state``.

    Raises:
      TypeError: ``update`` is not a state (or Keras metric), or ``value`` is neither None,
        ``update`` itself nor a callable.
    """
    value, update = pair
    if isinstance(update, tuple):
        raise TypeError(
            f"eval_metric_ops[{name!r}]: in a (value, update) pair, update must not be a pair itself."
        )
    try:
        state = as_metric_state(update, name)
    except TypeError as e:
        raise TypeError(
            f"eval_metric_ops[{name!r}]: in a (value, update) pair, update must be a metric state (the "
            f"batch's contribution: merge/compute) or a Keras metric; got {type(update).__name__}. JAX "
            "has no update ops: return the state that jaxspec.metrics functions give."
        ) from e
    if value is None or value is update:
        return state
    if callable(value) and not is_metric_state(value):
        return PairMetric(state=state, value_fn=value)
    raise TypeError(
        f"eval_metric_ops[{name!r}]: in a (value, update) pair, value must be None, the update state "
        f"itself or a function of the merged state; got {type(value).__name__}. An array computed from "
        "one batch cannot be the value over the whole evaluation."
    )


# -- Keras -------------------------------------------------------------------------------------
class _KerasRef:
    """A Keras metric object kept in a treedef, equal to another of the same class and
    config, name aside (each trace may create a new object, and Keras numbers their names)."""

    __slots__ = ("key", "metric")

    def __init__(self, metric: keras.metrics.Metric) -> None:
        self.metric = metric
        try:
            fields = {k: v for k, v in metric.get_config().items() if k != "name"}  # Keras numbers names
            config = json.dumps(fields, sort_keys=True, default=repr)
        except Exception:
            config = f"id:{id(metric)}"
        self.key = (type(metric).__module__, type(metric).__qualname__, config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _KerasRef) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"KerasMetric({self.key[1]})"


class KerasMetric(Metric):
    """A Keras 3 metric's variables as a mergeable state.

    ``variables`` are the metric's variable values (a list of arrays, in
    ``metric.variables`` order); ``padded`` counts padded rows the update could not
    exclude (0 for ``keras_metric``). ``compute`` is ``metric.stateless_result(variables)``.
    """

    variables: list[Any]
    padded: jax.Array
    ref: _KerasRef = struct.field(pytree_node=False)

    def check_result(self) -> None:
        """ValueError when the (concrete) state counted padded rows; nothing when traced.

        Raises:
          ValueError: the metric object was updated by model_fn/metric_fn on a batch with
            padded rows, so its statistics include them.
        """
        if is_concrete(self.padded) and float(np.asarray(self.padded)) > 0:
            raise ValueError(
                f"{self.ref!r} was updated by model_fn/metric_fn on a batch with "
                f"{int(np.asarray(self.padded))} padded rows, which it counted; use "
                "jaxspec.metrics.keras_metric(metric, labels, predictions), which leaves padding out."
            )

    def compute(self) -> PyTree:
        """The Keras metric's ``result`` from the merged variables.

        Raises:
          ValueError: (concrete state) the metric object was updated by model_fn on a
            batch with padded rows, so its statistics include them. A traced state gives
            NaN instead.
        """
        self.check_result()
        result = self.ref.metric.stateless_result(list(self.variables))
        if is_concrete(self.padded):
            return result
        return jax.tree.map(lambda r: jnp.where(self.padded > 0, jnp.nan, r), result)


def _require_jax_keras(metric: keras.metrics.Metric, name: str) -> types.ModuleType:
    """Import keras and check that ``metric`` can be streamed as JAX arrays.

    Raises:
      TypeError: keras is not importable, its backend is not JAX, or ``metric`` lacks the
        stateless API.
    """
    try:
        import keras
    except ImportError as e:
        raise TypeError(
            f"eval_metric_ops[{name!r}]: a Keras-style metric ({type(metric).__name__}) can only be "
            "streamed through Keras 3's stateless API, and keras is not installed."
        ) from e
    backend = keras.backend.backend()
    if backend != "jax":
        raise TypeError(
            f"eval_metric_ops[{name!r}]: Keras metrics are streamed through Keras 3's stateless API on "
            f"JAX arrays, which needs the JAX backend (KERAS_BACKEND=jax before keras is imported); the "
            f"backend is {backend!r}."
        )
    for attr in ("stateless_update_state", "stateless_result", "variables"):
        if not hasattr(metric, attr):
            raise TypeError(
                f"eval_metric_ops[{name!r}]: {type(metric).__name__} has update_state/result but no "
                f"{attr}; only Keras 3 metrics (keras.metrics.Metric) can be streamed."
            )
    return keras


def _check_additive(metric: keras.metrics.Metric, name: str) -> None:
    """Reject a metric whose fresh variables are not all zero (their sum is meaningless).

    Raises:
      TypeError: a fresh copy of the metric has a non-zero variable.
    """
    try:
        with jax.ensure_compile_time_eval():  # concrete initial values even inside a trace
            fresh = type(metric).from_config(metric.get_config())
            initial = [(v.path, v.value) for v in fresh.variables]
    except Exception:
        return
    for path, value in initial:
        if is_concrete(value) and np.any(np.asarray(value) != 0):
            raise TypeError(
                f"eval_metric_ops[{name!r}]: {type(metric).__name__} starts with non-zero variable "
                f"{path!r}, so its per-batch states cannot be merged by adding them."
            )


def _padding_rows() -> jax.Array:
    """Number of padded rows in the batch being traced (0 outside evaluation)."""
    mask = active_padding_mask()
    if mask is None:
        return jnp.zeros((), jnp.float32)
    return jnp.sum(1.0 - jnp.asarray(mask, jnp.float32))


def from_keras_object(metric: keras.metrics.Metric, name: str) -> KerasMetric:
    """A Keras metric updated inside this trace, as a state (see the module docstring).

    Raises:
      TypeError: not a Keras 3 metric on the JAX backend; its variables were not updated in
        this trace (they are concrete values, which every step would add again); its fresh
        variables are not zero.
    """
    _require_jax_keras(metric, name)
    values = [v.value for v in metric.variables]
    if not values or is_concrete(values):
        raise TypeError(
            f"eval_metric_ops[{name!r}]: the Keras metric {type(metric).__name__} was not updated inside "
            "model_fn/metric_fn (its variables are not traced values). Create it and call update_state "
            "there, or use jaxspec.metrics.keras_metric(metric, labels, predictions)."
        )
    _check_additive(metric, name)
    return KerasMetric(variables=values, padded=_padding_rows(), ref=_KerasRef(metric))


def keras_metric(
    metric: keras.metrics.Metric, *args: Any, sample_weight: ArrayLike | None = None, **kwargs: Any
) -> KerasMetric:
    """The state of one batch of a Keras 3 metric (JAX backend), padding excluded.

    Runs ``metric.stateless_update_state(zeros, *args, sample_weight=w, **kwargs)`` where
    ``w`` is ``sample_weight`` times the padding mask (``[batch]``, broadcast over the
    trailing axes of ``sample_weight``); ``metric`` itself is not changed. The value is
    ``metric.result`` of the merged variables, computed once at the end.

    Args:
      metric: a Keras 3 metric object, e.g. ``keras.metrics.AUC()``; built (it has its
        variables).
      *args, **kwargs: the arguments of its ``update_state`` (usually ``y_true, y_pred``);
        the first one's axis 0 is the batch.
      sample_weight: None or per-example weights ``[batch, ...]``.

    Returns:
      A ``KerasMetric`` state.

    Raises:
      TypeError: not a Keras 3 metric, the Keras backend is not JAX, or the metric's fresh
        variables are not zero.
    """
    name = getattr(metric, "name", type(metric).__name__)
    _require_jax_keras(metric, name)
    _check_additive(metric, name)
    mask = active_padding_mask()
    if mask is not None:
        mask = jnp.asarray(mask, jnp.float32)
        if sample_weight is None:
            sample_weight = mask
        else:
            sw = jnp.asarray(sample_weight, jnp.float32)
            sample_weight = sw * mask.reshape(mask.shape + (1,) * (sw.ndim - 1)) if sw.ndim else sw * mask
    zeros = [jnp.zeros(v.shape, v.dtype) for v in metric.variables]
    values = metric.stateless_update_state(zeros, *args, sample_weight=sample_weight, **kwargs)
    return KerasMetric(variables=list(values), padded=jnp.zeros((), jnp.float32), ref=_KerasRef(metric))


def as_metric_state(value: object, name: str = "") -> MetricState:
    """Normalise an ``eval_metric_ops`` (or metric_fn) value into a mergeable state.

    Accepted forms:

    * a metric state: anything with ``merge`` and ``compute`` (returned as is);
    * a ``(value, update)`` pair whose ``update`` is a metric state (or a Keras metric,
      see below) and whose ``value`` is None, the very same object as ``update``, or a
      callable ``value(merged_state) -> result`` that replaces ``compute()``. This is
      TF's pair read the JAX way: ``update`` is what each batch contributes, ``value``
      says how to read the merged statistics once at the end. An array ``value`` is
      rejected: it could only be this batch's value, never the streamed one;
    * a Keras 3 metric object (``update_state``/``result``, JAX backend) that model_fn or
      metric_fn created and updated in this trace; see ``jaxspec.metrics.keras``.

    Raises:
      TypeError: ``value`` is none of these forms (the message says why).
    """
    if is_metric_state(value):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return from_pair(value, name)
    if callable(getattr(value, "update_state", None)) and callable(getattr(value, "result", None)):
        return from_keras_object(value, name)
    raise TypeError(
        f"eval_metric_ops[{name!r}] must be a metric state (merge/compute), a (value, update) pair "
        f"or a Keras metric object, got {type(value).__name__}."
    )
