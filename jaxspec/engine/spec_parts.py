"""Turn whatever spec a model_fn returned into the parts the compiled step needs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxspec.metrics.adapters import as_metric_state
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.estimator_spec import EstimatorSpec
from jaxspec.spec.fn_types import PyTree, State
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.spec.host_call import HostCallHook
from jaxspec.spec.npu_estimator_spec import NPUEstimatorSpec
from jaxspec.spec.scaffold import Scaffold
from jaxspec.spec.tpu_estimator_spec import TPUEstimatorSpec


@dataclasses.dataclass
class HostCall:
    """A host function and how to rebuild its arguments from a flat list of arrays."""

    fn: Callable[..., Any]
    keys: tuple[str, ...] | None  # dict keys, or None for positional tensors
    tensors: list[Any]

    def call(self, values: list[Any]) -> Any:
        """Call ``fn`` with ``values`` (numpy), positionally or by the recorded keys."""
        if self.keys is None:
            return self.fn(*values)
        return self.fn(**dict(zip(self.keys, values, strict=True)))


@dataclasses.dataclass
class SpecParts:
    """The parts of one traced spec: arrays for the step to return, static facts for the host."""

    mode: str
    loss: Any = None
    new_state: State = None
    predictions: PyTree = None
    metric_states: dict[str, Any] | None = None
    metric_fn: tuple[Callable[..., Any], Any] | None = None
    host_calls: list[HostCall] = dataclasses.field(default_factory=list)
    hooks: tuple[SessionRunHook, ...] = ()
    chief_hooks: tuple[SessionRunHook, ...] = ()
    scaffold: Scaffold | None = None
    export_outputs: dict[str, Any] | None = None
    reads_padding_mask: bool = False  # model_fn read current_padding_mask() in this trace

    @property
    def all_hooks(self) -> tuple[SessionRunHook, ...]:
        """The spec's hooks for this mode, chief-only ones last."""
        return self.hooks + self.chief_hooks

    def hook_tensors(self) -> list[dict[str, Any]]:
        """Each hook's ``step_tensors()``, with a leading replica axis of 1 (so the mesh
        concatenates replicas on it): ``[{name: array [1, ...]}]`` aligned with all_hooks."""
        return [{k: jnp.asarray(v)[None] for k, v in h.step_tensors().items()} for h in self.all_hooks]


def _host_call(pair: tuple[Callable[..., Any], Any], on_mesh: bool) -> HostCall:
    fn, tensors = pair
    keys = tuple(tensors) if isinstance(tensors, dict) else None
    values = list(tensors.values()) if isinstance(tensors, dict) else list(tensors)
    for i, value in enumerate(values):
        if on_mesh and getattr(value, "ndim", 0) < 1:
            name = keys[i] if keys else i
            raise ValueError(
                f"host_call tensor {name!r} has rank 0; on the mesh each host_call tensor is "
                "concatenated over replicas on axis 0, so give it rank >= 1 (e.g. loss[None])."
            )
    return HostCall(fn=fn, keys=keys, tensors=values)


def _mode_hooks(
    spec: EstimatorSpec, mode: str
) -> tuple[tuple[SessionRunHook, ...], tuple[SessionRunHook, ...]]:
    if mode == ModeKeys.TRAIN:
        return spec.training_hooks, spec.training_chief_hooks
    if mode == ModeKeys.EVAL:
        return spec.evaluation_hooks, ()
    return spec.prediction_hooks, ()


def unpack_spec(spec: Any, mode: str, on_mesh: bool) -> SpecParts:
    """Split a spec returned by model_fn in ``mode`` into a SpecParts.

    Off the mesh a TPUEstimatorSpec is first turned into ``as_estimator_spec()``, as
    TPUEstimator does on CPU. The spec's own ``mode`` is not compared with ``mode`` (a
    spec built with ``mode=None`` runs in any phase, as in tf.estimator); which spec
    classes an Estimator accepts is checked before this, by the Estimator.

    Raises:
      ValueError: model_fn did not return one of the three spec classes; an
        EstimatorSpec with eval_metric_ops on the mesh (metrics there come from
        TPUEstimatorSpec.eval_metrics).
    """
    if not isinstance(spec, (EstimatorSpec, TPUEstimatorSpec)):
        raise ValueError(
            "model_fn must return an EstimatorSpec (or a TPUEstimatorSpec / NPUEstimatorSpec), "
            f"got {type(spec).__name__}."
        )
    if isinstance(spec, TPUEstimatorSpec) and on_mesh:
        hooks = {ModeKeys.TRAIN: spec.training_hooks, ModeKeys.EVAL: spec.evaluation_hooks}.get(
            mode, spec.prediction_hooks
        )
        host_calls = (
            [] if spec.host_call is None or mode == ModeKeys.PREDICT else [_host_call(spec.host_call, True)]
        )
        return SpecParts(
            mode=mode,
            loss=spec.loss,
            new_state=spec.train_op,
            predictions=spec.predictions,
            metric_fn=spec.eval_metrics if mode == ModeKeys.EVAL else None,
            host_calls=host_calls,
            hooks=tuple(hooks),
            scaffold=spec.scaffold(),
            export_outputs=spec.export_outputs,
        )
    if isinstance(spec, TPUEstimatorSpec):
        spec = spec.as_estimator_spec()
    hooks, chief_hooks = _mode_hooks(spec, mode)
    host_calls = [
        _host_call(h.host_call, on_mesh) for h in hooks + chief_hooks if isinstance(h, HostCallHook)
    ]
    npu_host_call = spec.host_call if isinstance(spec, NPUEstimatorSpec) else None
    if npu_host_call is not None and mode != ModeKeys.PREDICT:
        host_calls.append(_host_call(npu_host_call, on_mesh))
    if on_mesh and mode == ModeKeys.EVAL and spec.eval_metric_ops:
        raise ValueError(
            "On the mesh, eval metrics come from TPUEstimatorSpec.eval_metrics (metric_fn, tensors); "
            "an EstimatorSpec's eval_metric_ops would be computed per replica."
        )
    return SpecParts(
        mode=mode,
        loss=spec.loss,
        new_state=spec.train_op,
        predictions=spec.predictions,
        metric_states=(
            {k: as_metric_state(v, k) for k, v in spec.eval_metric_ops.items()}
            if mode == ModeKeys.EVAL
            else None
        ),
        host_calls=host_calls,
        hooks=tuple(h for h in hooks if not isinstance(h, HostCallHook)),
        chief_hooks=tuple(h for h in chief_hooks if not isinstance(h, HostCallHook)),
        scaffold=spec.scaffold,
        export_outputs=spec.export_outputs,
    )


def first_difference(state: State, new_state: State) -> str:
    """Where the tree structures of ``state`` and ``new_state`` first differ: a key path
    and what each tree has there (not the whole trees)."""
    paths = [
        [jax.tree_util.keystr(p) or "<root>" for p, _ in jax.tree_util.tree_flatten_with_path(t)[0]]
        for t in (state, new_state)
    ]
    old, new = paths
    missing = [p for p in old if p not in set(new)]
    extra = [p for p in new if p not in set(old)]
    if missing and extra:
        return f"state's leaf {missing[0]} is not in train_op, which has {extra[0]} instead"
    if missing:
        return f"train_op lacks state's leaf {missing[0]} ({len(missing)} leaves missing)"
    if extra:
        return f"train_op has the leaf {extra[0]}, which state lacks ({len(extra)} leaves more)"
    return (
        f"the same leaf paths in containers of other types (state: {type(state).__name__}, "
        f"train_op: {type(new_state).__name__}; a tuple for a list, a dict for a dataclass?)"
    )


def check_new_state(state: State, new_state: State) -> State:
    """Check that ``new_state`` (train_op) matches ``state`` leaf by leaf; return it with
    each leaf cast to the old leaf's exact dtype (so a scan carry keeps its type).

    Raises:
      ValueError: tree structure, a shape or a dtype differs; names the first leaf.
    """
    old_paths, old_def = jax.tree_util.tree_flatten_with_path(state)
    new_leaves, new_def = jax.tree_util.tree_flatten(new_state)
    if old_def != new_def:  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef
        raise ValueError(
            f"train_op (the new state) must have the tree structure of state; {first_difference(state, new_state)}."
        )
    out = []
    for (path, old), new in zip(old_paths, new_leaves, strict=True):
        where = jax.tree_util.keystr(path) or "<root>"
        new = jnp.asarray(new)  # a Python number leaf becomes an array of JAX's dtype
        if tuple(old.shape) != tuple(new.shape):
            raise ValueError(
                f"train_op leaf {where} has shape {tuple(new.shape)}, state has {tuple(old.shape)}."
            )
        if jax.dtypes.issubdtype(old.dtype, jax.dtypes.extended) or jax.dtypes.issubdtype(
            new.dtype, jax.dtypes.extended
        ):  # PRNG keys: no conversion exists, the key type must be the same
            if old.dtype != new.dtype:
                raise ValueError(f"train_op leaf {where} has dtype {new.dtype}, state has {old.dtype}.")
            out.append(new)
            continue
        weak = getattr(getattr(new, "aval", new), "weak_type", False)  # from a Python number
        same_kind = jnp.issubdtype(new.dtype, jnp.floating) == jnp.issubdtype(old.dtype, jnp.floating)
        canonical = jax.dtypes.canonicalize_dtype
        if canonical(old.dtype) != canonical(new.dtype) and not (weak and same_kind):
            raise ValueError(f"train_op leaf {where} has dtype {new.dtype}, state has {old.dtype}.")
        out.append(jax.lax.convert_element_type(new, old.dtype))
    return jax.tree_util.tree_unflatten(old_def, out)
