"""Compiled loops: ``iterations_per_loop`` steps of model_fn in one ``lax.scan``.

Each loop takes host batches stacked as ``[steps, batch, ...]``. On the mesh the scan runs
inside ``jax.shard_map`` over the ``'replica'`` axis (model_fn sees its replica's rows);
host_call, eval_metrics and prediction tensors leave the shard_map with
``out_specs=P(None, 'replica')``, i.e. concatenated over replicas on axis 0, replica 0
first. host_call tensors come back to the host as loop outputs, so the host calls each
host function once per step, in step order, after the loop: no callback runs per device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxspec._fn_args import call_with_declared
from jaxspec.config.run_config import RunConfig
from jaxspec.engine.mesh import cores_per_replica, replica_axis, replica_index
from jaxspec.engine.partitioning import constrain_state
from jaxspec.engine.spec_parts import SpecParts, check_new_state, unpack_spec
from jaxspec.metrics import Mean, mean
from jaxspec.metrics.adapters import as_metric_state
from jaxspec.metrics.base import padding_mask_reads, padding_mask_scope
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import Features, Labels, State
from jaxspec.spec.host_call import call_with_tensors
from jaxspec.train_utils.learning_rate import find_learning_rate
from jaxspec.train_utils.loss_scale import find_loss_scale

_METRIC_STEPS = 32  # steps whose metric_fn runs as one vectorised batch on the mesh


def _metrics_per_step(step_metrics: Callable[[Any], Any], args: Any, steps: int) -> Any:
    """``step_metrics`` over the steps of ``args`` (axis 0), in vectorised batches of up
    to 32 steps: one set of cross-device reductions per batch rather than per step. A
    metric_fn that cannot be vectorised (a ``jax.pure_callback`` without a
    ``vmap_method``, say) runs step by step instead; a real error in it is raised there."""
    try:
        return jax.lax.map(step_metrics, args, batch_size=min(steps, _METRIC_STEPS))
    except Exception:  # noqa: BLE001 - retried one step at a time, which raises real errors
        return jax.lax.map(step_metrics, args)


# ``((state, step), key, (features, labels)) -> ((state, step), per-step outputs)``: one
# training step (``StepEngine.train_step``).
TrainStep = Callable[[Any, Any, Any], Any]

# Called with each trace's SpecParts (hooks, host functions, scaffold, export heads): how
# spec parts leave a trace. Their arrays are tracers and must not be used.
RecordParts = Callable[[SpecParts], None]


class LoopFn(NamedTuple):
    """A compiled loop before ``jax.jit``: the traceable function and the
    ``out_shardings`` its jit takes (None: XLA's choice)."""

    fn: Callable[..., Any]
    out_shardings: Any = None


class TrainLoopOut(NamedTuple):
    """What a train loop of N steps returns (all on the devices).

    Attributes:
      state: the state after the N steps.
      step: the global step after them (int32 scalar).
      losses: ``[N, R]`` per step and replica.
      host: one entry per host call: a list of arrays ``[N, R*b, ...]``.
      hook_values: one entry per spec hook: ``{name: array [N, R, ...]}``.
      loss_scales: ``[N, R]``, the loss scale the state holds after each step (a
        ``jaxspec.LossScaleOptimizer``'s), or None when the state holds none.
      learning_rates: ``[N, R]`` float32, the ``optax.inject_hyperparams``
        ``learning_rate`` the state holds after each step (the one that step's update
        used), or None when the state holds none.
    """

    state: State
    step: Any
    losses: Any
    host: list[Any]
    hook_values: list[Any]
    loss_scales: Any = None
    learning_rates: Any = None


class EvalLoopOut(NamedTuple):
    """What an eval loop of N steps returns: ``metric_states`` (``{name: metric state}``,
    ``'loss'`` included, merged over the N steps), ``host`` and ``hook_values`` as in
    TrainLoopOut; ``totals`` and ``values``: None here. A loop that carries metric
    totals (``jaxspec.loop.eval_totals``) returns there the states merged over every
    loop so far and their metrics' values, and keeps only ``'loss'`` in
    ``metric_states``."""

    metric_states: dict[str, Any]
    host: list[Any]
    hook_values: list[Any]
    totals: Any = None
    values: Any = None


class PredictLoopOut(NamedTuple):
    """What a predict loop of N steps returns: ``predictions`` (arrays ``[N, R*b, ...]``)
    and ``hook_values`` as in TrainLoopOut."""

    predictions: Any
    hook_values: list[Any]


def trace_local(state: State) -> State:
    """``state`` rebuilt from its leaves in the current trace: the same arrays (tracers of
    an outer trace stay what they are; nothing is copied), new pytree nodes. A scan body
    that closes over the state gives model_fn these, so objects that check the trace they
    were made in (flax.nnx modules: ``model.eval()`` sets attributes) belong to the body's
    trace, as the carried state of a train step does."""
    leaves, treedef = jax.tree.flatten(state)
    return jax.tree.unflatten(treedef, leaves)


def merge_metric_dicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge two ``{name: metric state}`` dicts key by key."""
    return {k: a[k].merge(b[k]) for k in a}


def _avals(tree: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """A pytree's structure and its leaves' shapes and dtypes."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [(x.shape, x.dtype) for x in leaves]


def _fold_steps(states: dict[str, Any]) -> dict[str, Any]:
    """Merge metric states stacked on axis 0 (one per step) into one state per metric.

    A scan when ``merge`` keeps the states' shapes and dtypes (sums, counts, confusion
    matrices); a merge that changes them (a state that concatenates its batches) cannot
    be a scan's carry, so those steps are merged one after another in the trace."""
    n = jax.tree.leaves(states)[0].shape[0]
    first = jax.tree.map(lambda x: x[0], states)
    if n == 1:
        return first
    if _avals(jax.eval_shape(merge_metric_dicts, first, first)) != _avals(first):
        merged = first
        for i in range(1, n):
            merged = merge_metric_dicts(merged, jax.tree.map(lambda x, i=i: x[i], states))
        return merged
    rest = jax.tree.map(lambda x: x[1:], states)
    merged, _ = jax.lax.scan(lambda c, s: (merge_metric_dicts(c, s), None), first, rest)
    return merged


def _traced_free_variables(fn: Callable[..., Any]) -> list[str]:
    """The names of ``fn``'s closure variables that hold JAX tracers: values of a trace
    around it (model_fn's, when metric_fn is defined inside model_fn and uses them)."""
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    found = []
    for name, cell in zip(names, getattr(fn, "__closure__", None) or (), strict=False):
        try:
            leaves = jax.tree.leaves(cell.cell_contents)
        except Exception:  # an empty cell, or contents that are no pytree
            continue
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            found.append(name)
    return found


def _closed_over_error(closed: list[str]) -> ValueError:
    return ValueError(
        f"TPUEstimatorSpec.eval_metrics: metric_fn uses {closed or 'values'} from model_fn without "
        "taking them as arguments. On the mesh metric_fn runs on the tensors gathered from every "
        "replica's steps (as TPUEstimator runs it on the host), where model_fn's own values do not "
        "exist: pass each value it needs in the tensors list, eval_metrics=(metric_fn, [labels, logits])."
    )


def _holds_replica_values(tree: Any) -> bool:
    """Whether ``tree`` holds values of a replica's trace (a shard_map manual over the
    replicas) outside it: values model_fn computed, escaped through a closure."""
    for x in jax.tree.leaves(tree):
        sharding = getattr(jax.typeof(x), "sharding", None) if isinstance(x, jax.core.Tracer) else None
        mesh = getattr(sharding, "mesh", None)
        if mesh is not None and jax.sharding.AxisType.Manual in getattr(mesh, "axis_types", ()):
            return True
    return False


@contextlib.contextmanager
def _metric_fn_errors(fn: Callable[..., Any]) -> Iterator[None]:
    """On the mesh, metric_fn's use of model_fn's own values (closed over, not passed as
    its tensors) is a ValueError naming ``eval_metrics`` and those values, also when JAX
    raised first (its message speaks of meshes)."""
    try:
        yield
    except Exception as err:
        closed = _traced_free_variables(fn)
        if not closed:
            raise
        raise _closed_over_error(closed) from err


def _check_metric_names(metrics: dict[str, Any]) -> None:
    """An eval metric may not be called ``loss`` or ``global_step``: evaluate reports the
    loss and the global step under those names (tf.estimator raises ValueError for both)."""
    for name in ("loss", "global_step"):
        if name in metrics:
            raise ValueError(
                f"an eval metric is named {name!r}; that name is the Estimator's own {name}. Rename it."
            )


def _replica_loss(losses: Any, mask: Any) -> Mean:
    """The eval loss's Mean over a loop's replica losses ``[N, R]`` with the mask
    ``[N, R, b]``. Each replica's weight is its share of real rows, ``n_r / b``, or for
    the steps of a short batch (``SPLIT`` rows, a loop of their own) ``n_r * R / G``, G
    the real rows of those steps, so that batch weighs as a full one
    (``jaxspec.loop.short_batch``).

    Only sums over the replicas are taken before the weights are applied (per step: real
    rows, SPLIT rows, loss times real rows), so on a mesh XLA reduces them across the
    devices in the one all-reduce it also gives the metric states, rather than in
    reductions of their own that every device waits for before the loop's scan."""
    real = (mask > 0).astype(jnp.float32)
    n_r = jnp.sum(real, axis=-1)  # [N, R]
    # float32, as mean(); an all-padding replica's loss may be NaN
    losses = jnp.where(n_r > 0, jnp.asarray(losses, jnp.float32), 0.0)
    rows = jnp.sum(n_r, axis=1)  # [N]
    weighted = jnp.sum(losses * n_r, axis=1)  # [N]
    split = jnp.sum((mask > 1).astype(jnp.float32), axis=(1, 2)) > 0  # [N]
    replicas, b = mask.shape[1], mask.shape[2]
    split_rows = jnp.maximum(jnp.sum(jnp.where(split, rows, 0.0)), 1.0)
    total = jnp.where(split, weighted * replicas / split_rows, weighted / b)
    count = jnp.where(split, rows * replicas / split_rows, rows / b)
    return Mean(total=jnp.sum(total), count=jnp.sum(count))


def _metric_tensors(parts: SpecParts) -> list[Any]:
    """The eval_metrics tensors of a TPUEstimatorSpec as a flat list (empty if none)."""
    if parts.metric_fn is None:
        return []
    tensors = parts.metric_fn[1]
    return list(tensors.values()) if isinstance(tensors, dict) else list(tensors)


def _export_heads(parts: SpecParts) -> dict[str, Any]:
    """``{head: {output key: array}}`` of a PREDICT trace's export_outputs.

    Raises:
      ValueError: the spec has no export_outputs (one built with ``mode=None`` skips the
        PREDICT defaults).
    """
    if parts.export_outputs is None:
        raise ValueError("model_fn's spec in PREDICT has no export_outputs; build it with mode=PREDICT.")
    return {head: out.tensors() for head, out in parts.export_outputs.items()}


class StepEngine:
    """Builds the compiled train/eval/predict loops of one model_fn.

    Args:
      model_fn: the user's model_fn (called with the arguments it declares).
      params: dict passed as ``params`` (already holding ``batch_size`` where
        TPUEstimator sets it), per mode.
      config: the RunConfig passed as ``config``.
      mesh: the replica Mesh, or None for one device (``jax.jit`` only). On a 2-D
        ``('replica', 'core')`` mesh the shard_map is manual over ``'replica'`` only:
        inside a replica XLA partitions model_fn over ``'core'``.
      partition_rules: ``(regex, PartitionSpec)`` pairs laying the state out over
        ``'core'`` (see ``jaxspec.engine.partitioning``); the call's state lifecycle
        resolves them into the state shardings passed to ``train_loop``.

    Each loop builder takes ``record``, called with the SpecParts of every trace of
    model_fn it makes; the engine keeps none of them.
    """

    def __init__(
        self,
        model_fn: Callable[..., Any],
        params: dict[str, dict[str, Any]],
        config: RunConfig,
        mesh: Mesh | None,
        broadcast: bool = False,
        partition_rules: Any = None,
    ) -> None:
        self.model_fn = model_fn
        self.partition_rules = partition_rules
        self.params = params
        self.config = config
        self.mesh = mesh
        self.broadcast = broadcast
        # Inputs split over replicas, or (BROADCAST) whole on each; per-example outputs are
        # then concatenated over replicas, or replica 0's (all replicas saw the same rows).
        self._stacked = P(None, replica_axis(mesh))  # TPUConfig's replica_axis_name
        self._batch = P() if broadcast else self._stacked

    # -- one model_fn call -------------------------------------------------------------
    def _call(
        self,
        mode: str,
        state: State,
        step: Any,
        key: Any,
        features: Features,
        labels: Labels,
        record: RecordParts | None = None,
    ) -> SpecParts:
        rng = jax.random.fold_in(jax.random.fold_in(key, step), replica_index(self.mesh))
        reads = padding_mask_reads()
        spec = call_with_declared(
            self.model_fn,
            dict(
                features=features,
                labels=labels,
                mode=mode,
                params=self.params[mode],
                config=self.config,
                state=state,
                rng=rng,
                global_step=step,
            ),
        )
        parts = unpack_spec(spec, mode, on_mesh=self.mesh is not None)
        parts.reads_padding_mask = padding_mask_reads() > reads
        if record is not None:
            record(parts)
        return parts

    def _shard(self, fn: Callable[..., Any], in_specs: Any, out_specs: Any) -> Callable[..., Any]:
        if self.mesh is None:
            return fn
        # Manual over 'replica' only: on a ('replica', 'core') mesh, 'core' stays with XLA.
        return jax.shard_map(
            fn,
            mesh=self.mesh,
            in_specs=in_specs,
            out_specs=out_specs,
            axis_names={replica_axis(self.mesh)},
            check_vma=False,
        )

    # -- train ---------------------------------------------------------------------------
    def train_step(self, state_shardings: Any, record: RecordParts) -> TrainStep:
        """One training step as a loop body: ``((state, step), key, (features, labels)) ->
        ((new state, step + 1), (loss[R], host, hook values, loss scale[R] | None,
        learning rate[R] | None))``, the per-step outputs of a TrainLoopOut before
        stacking; the state stays in ``state_shardings``."""

        def body(carry: Any, key: Any, batch: Any) -> Any:
            st, gs = carry
            batch_features, batch_labels = batch
            parts = self._call(ModeKeys.TRAIN, st, gs, key, batch_features, batch_labels, record=record)
            new_state = constrain_state(check_new_state(st, parts.new_state), state_shardings)
            host = [hc.tensors for hc in parts.host_calls]
            scale = find_loss_scale(new_state)  # for the loss_scale summary
            scale = None if scale is None else jnp.asarray(scale, jnp.float32)[None]
            rate = find_learning_rate(new_state)  # for the learning_rate summary
            rate = None if rate is None else jnp.asarray(rate, jnp.float32).reshape(())[None]
            return (new_state, gs + 1), (parts.loss[None], host, parts.hook_tensors(), scale, rate)

        return body

    def train_loop(self, state_shardings: Any, record: RecordParts) -> LoopFn:
        """``(state, step, key, features, labels) -> TrainLoopOut``; the state stays in
        ``state_shardings`` (a pytree of Shardings like the state, or None)."""

        body = self.train_step(state_shardings, record)

        def loop(state: State, step: Any, key: Any, features: Features, labels: Labels) -> Any:
            (state, step), outs = jax.lax.scan(
                lambda carry, batch: body(carry, key, batch), (state, step), (features, labels)
            )
            return (state, step, *outs)

        b, s = self._batch, self._stacked
        sharded = self._shard(loop, (P(), P(), P(), b, b), (P(), P(), s, b, s, s, s))

        def train_loop(*args: Any) -> TrainLoopOut:  # jit's name for the executable: jit_train_loop
            return TrainLoopOut(*sharded(*args))

        if cores_per_replica(self.mesh) == 1 or state_shardings is None:
            return LoopFn(train_loop)
        # out_shardings is a TrainLoopOut of shardings (None: XLA's choice for every field
        # but the state), not of arrays; _make takes its items untyped.
        rest = (None,) * (len(TrainLoopOut._fields) - 1)
        return LoopFn(train_loop, TrainLoopOut._make((state_shardings, *rest)))

    # -- eval ----------------------------------------------------------------------------
    def eval_step(self, record: RecordParts) -> Callable[..., Any]:
        """Off the mesh, one eval step as a loop body: ``(state, step, key, (features,
        labels, mask)) -> ({name: metric state}, host, hook values)``, ``'loss'`` (a Mean
        of the batch loss) among the metric states, as one step of ``eval_loop``."""

        def body(state: State, step: Any, key: Any, batch: Any) -> Any:
            f, lab, m = batch
            with padding_mask_scope((m > 0).astype(m.dtype)):  # > 1: a loss weight
                parts = self._call(ModeKeys.EVAL, trace_local(state), step, key, f, lab, record=record)
                metric_states = parts.metric_states or {}  # a dict in EVAL
                _check_metric_names(metric_states)
                payload = {"loss": mean(parts.loss), **metric_states}
            return payload, [hc.tensors for hc in parts.host_calls], parts.hook_tensors()

        return body

    def eval_loop(self, record: RecordParts) -> LoopFn:
        """``(state, step, key, features, labels, mask[N, B]) -> EvalLoopOut``.

        Its metric states hold ``'loss'`` (a Mean of the per-batch losses; on the mesh each
        replica's loss weighted by the mean of its mask, see ``jaxspec.loop.short_batch``)
        and every metric, merged over the N steps.
        """
        on_mesh = self.mesh is not None
        traced: list[SpecParts] = []  # this trace's parts (metric_fn is applied outside the scan)

        def keep(parts: SpecParts) -> None:
            traced.append(parts)
            record(parts)

        def replica_loop(
            state: State, step: Any, key: Any, features: Features, labels: Labels, mask: Any
        ) -> Any:
            def body(carry: Any, batch: Any) -> Any:
                f, lab, m = batch
                with padding_mask_scope((m > 0).astype(m.dtype)):  # > 1: a loss weight
                    parts = self._call(ModeKeys.EVAL, trace_local(state), step, key, f, lab, record=keep)
                    loss = parts.loss
                    payload: list[Any] | dict[str, Any]
                    if on_mesh:
                        payload = _metric_tensors(parts)
                    else:
                        metric_states = parts.metric_states or {}  # a dict in EVAL
                        _check_metric_names(metric_states)
                        payload = {"loss": mean(loss), **metric_states}
                host = [hc.tensors for hc in parts.host_calls]
                return carry, (loss[None], payload, host, parts.hook_tensors())

            _, out = jax.lax.scan(body, None, (features, labels, mask))
            return out

        b = self._batch
        sharded = self._shard(replica_loop, (P(), P(), P(), b, b, b), (self._stacked, b, b, self._stacked))

        def loop(state: State, step: Any, key: Any, features: Features, labels: Labels, mask: Any) -> Any:
            losses, payload, host, hook_values = sharded(state, step, key, features, labels, mask)
            if not on_mesh:
                return EvalLoopOut(_fold_steps(payload), host, hook_values)
            parts = traced[-1]
            n, r = losses.shape
            states: dict[str, Any]
            if self.broadcast:  # every replica holds the whole batch: each step counts once
                frac = jnp.broadcast_to(jnp.max(mask, axis=-1, keepdims=True) > 0, (n, r)).astype(mask.dtype)
                states = {"loss": mean(jnp.where(frac > 0, losses, 0.0), weights=frac)}
            else:
                states = {"loss": _replica_loss(losses, mask.reshape(n, r, -1))}
            if parts.metric_fn is not None:
                fn, tensors = parts.metric_fn
                keys = list(tensors) if isinstance(tensors, dict) else None

                def step_metrics(args: Any) -> Any:
                    values, m = args
                    with padding_mask_scope((m > 0).astype(m.dtype)):  # > 1: a loss weight
                        out = call_with_tensors(fn, dict(zip(keys, values, strict=True)) if keys else values)
                        if _holds_replica_values(out):
                            raise _closed_over_error(_traced_free_variables(fn))
                        return {k: as_metric_state(v, k) for k, v in out.items()}

                with _metric_fn_errors(fn):
                    per_step = _metrics_per_step(step_metrics, (payload, mask), n)
                _check_metric_names(per_step)
                states.update(_fold_steps(per_step))
            return EvalLoopOut(states, host, hook_values)

        return LoopFn(loop)

    # -- predict -------------------------------------------------------------------------
    def predict_loop(self, record: RecordParts) -> LoopFn:
        """``(state, step, key, features) -> PredictLoopOut``."""

        def loop(state: State, step: Any, key: Any, features: Features) -> Any:
            def body(carry: Any, f: Any) -> Any:
                parts = self._call(ModeKeys.PREDICT, trace_local(state), step, key, f, None, record=record)
                return carry, (parts.predictions, parts.hook_tensors())

            _, out = jax.lax.scan(body, None, features)
            return out

        b = self._batch
        sharded = self._shard(loop, (P(), P(), P(), b), (b, self._stacked))

        def predict_loop(*args: Any) -> PredictLoopOut:
            return PredictLoopOut(*sharded(*args))

        return LoopFn(predict_loop)

    # -- serving (export) ----------------------------------------------------------------
    def serving_fn(self, key: Any) -> Callable[[State, Features], Any]:
        """``(state, features) -> {head: {output: array}}``: model_fn in PREDICT off the
        mesh (TPUEstimator exports its CPU graph), for ``tf_bridge``."""

        def serve(state: State, features: Features) -> Any:
            parts = self._call(ModeKeys.PREDICT, state, jnp.zeros((), jnp.int32), key, features, None)
            return _export_heads(parts)

        return serve

    # -- all three modes, for tf_bridge's exports ------------------------------------------
    def export_fn(
        self, mode: str, key: Any, record: RecordParts | None = None
    ) -> Callable[[State, Any, Features, Labels], dict[str, Any]]:
        """``(state, global_step, features, labels) -> dict``: model_fn in ``mode`` off the
        mesh (TPUEstimator exports its CPU graph), for ``tf_bridge``'s SavedModel exports.

        ``global_step`` is an int32 scalar (the exported graph's step variable); ``rng``
        is folded from ``key`` and it, as in train/evaluate/predict. The dict holds
        PREDICT: ``heads`` (``{head: {output key: array}}``, from export_outputs);
        TRAIN: ``loss`` and ``new_state`` (train_op, checked against ``state``); EVAL:
        ``loss`` and ``metrics`` (``{name: metric state}`` of this batch); TRAIN and
        EVAL also ``predictions`` (None, an array or a dict of arrays). host_call
        tensors are never returned: no host function runs inside an export. ``record``
        gets each trace's SpecParts (for the export heads).
        """

        def fn(state: State, step: Any, features: Features, labels: Labels) -> dict[str, Any]:
            parts = self._call(mode, state, step, key, features, labels, record=record)
            if mode == ModeKeys.PREDICT:
                return {"heads": _export_heads(parts)}
            out = {"loss": parts.loss, "predictions": parts.predictions}
            if mode == ModeKeys.TRAIN:
                out["new_state"] = check_new_state(state, parts.new_state)
            else:
                out["metrics"] = dict(parts.metric_states or {})
            return out

        return fn
