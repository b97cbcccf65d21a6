"""The state's layout: ``partition_rules`` and flax partitioning metadata -> one
PartitionSpec over ``'core'`` per state leaf, checked against the leaf's shape.

A rule is a ``(regex, PartitionSpec)`` pair; the first whose regex ``re.search``es a
leaf's key path (``'/'``-joined, as checkpoints name leaves: ``params/dense_0/kernel``,
``opt_state/0/mu/dense_0/kernel``) gives its spec. A leaf boxed by flax
(``nn.with_partitioning`` / ``nn.with_logical_partitioning``) takes the box's axis names
(logical names go through flax's logical axis rules) before any rule, and so does a
flax.nnx Variable's sharding metadata (``nnx.with_partitioning``). Everything else is
replicated. Replicas always hold whole copies, so a spec may name ``'core'`` only.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxspec._trees import key_path_name
from jaxspec.engine.mesh import CORE_AXIS, REPLICA_AXIS, cores_per_replica, replicated
from jaxspec.spec.fn_types import PyTree, State

Rule = tuple[str, P]


def check_rules(rules: Any) -> list[tuple[re.Pattern[str], P]]:
    """``partition_rules`` compiled: a list of ``(pattern, PartitionSpec)``.

    Raises:
      TypeError: ``rules`` is not a sequence of pairs, or a spec is not a PartitionSpec.
      ValueError: a regex does not compile.
    """
    if rules is None:
        return []
    if isinstance(rules, (str, bytes, dict)) or not isinstance(rules, Sequence):
        raise TypeError(
            f"partition_rules must be a list of (regex, PartitionSpec) pairs, got {type(rules).__name__}."
        )
    out = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, (tuple, list)) or len(rule) != 2 or not isinstance(rule[0], str):
            raise TypeError(f"partition_rules[{i}] must be a (regex, PartitionSpec) pair, got {rule!r}.")
        if not isinstance(rule[1], P):
            raise TypeError(
                f"partition_rules[{i}] ({rule[0]!r}): the spec must be a jax.sharding.PartitionSpec, "
                f"got {type(rule[1]).__name__}."
            )
        try:
            out.append((re.compile(rule[0]), rule[1]))
        except re.error as e:
            raise ValueError(f"partition_rules[{i}]: {rule[0]!r} is not a valid regex ({e}).") from e
    return out


def _nnx_variable_type() -> Any:
    try:
        from flax import nnx
    except ImportError:  # flax without nnx
        return ()
    return nnx.Variable


def _is_box(x: Any) -> bool:
    from flax.core import meta

    return isinstance(x, (meta.AxisMetadata, _nnx_variable_type()))


def _nnx_spec(variable: Any) -> P | None:
    """The PartitionSpec of an nnx Variable's ``out_sharding`` (``sharding``) metadata
    (``nnx.with_partitioning``, ``nnx.Param(..., out_sharding=...)``), or None."""
    names = variable.get_metadata().get("out_sharding")
    if names is None:
        return None
    if isinstance(names, NamedSharding):
        names = names.spec
    if not isinstance(names, P) and any(n not in (None, CORE_AXIS) for n in names):
        from flax.linen import spmd  # logical names, through flax's logical axis rules

        rules = variable.get_metadata().get("sharding_rules") or spmd.get_logical_axis_rules()
        return spmd.logical_to_mesh_axes(tuple(names), rules)
    return names if isinstance(names, P) else P(*names)


@contextlib.contextmanager
def init_context() -> Iterator[None]:
    """Around init_fn: flax.nnx's eager sharding off, so an nnx Variable with sharding
    metadata is created without a mesh of its own; jaxspec lays the state out from the
    metadata (``metadata_specs``) when init_fn is compiled."""
    try:
        from flax import nnx
    except ImportError:
        yield
        return
    with nnx.use_eager_sharding(False):
        yield


def _box_spec(box: Any) -> P | None:
    """The mesh PartitionSpec of a flax box (logical names mapped by flax's rules)."""
    from flax.core import meta
    from flax.linen import spmd

    if isinstance(box, _nnx_variable_type()):
        return _nnx_spec(box)
    if isinstance(box, spmd.LogicallyPartitioned):
        rules = box.rules if box.rules is not None else spmd.get_logical_axis_rules()
        return spmd.logical_to_mesh_axes(box.names, rules)
    if isinstance(box, meta.Partitioned):
        return P(*box.names)
    return None


def metadata_specs(tree: PyTree) -> list[P | None]:
    """Per leaf of ``tree`` (in ``jax.tree.leaves`` order): the spec its flax box gives,
    or None."""
    out: list[P | None] = []
    for item in jax.tree.leaves(tree, is_leaf=_is_box):
        if _is_box(item):
            out.extend([_box_spec(item)] * len(jax.tree.leaves(item)))
        else:
            out.append(None)
    return out


def _check_spec(name: str, shape: tuple[int, ...], spec: P, origin: str, core_size: int) -> None:
    """Raise ValueError (naming the leaf, its shape and ``origin``) unless ``spec`` lays
    ``shape`` out over ``'core'`` only, each split dimension divisible by the cores."""
    where = f"state leaf {name!r} (shape {shape}), {origin}"
    if len(spec) > len(shape):
        raise ValueError(f"{where}: the spec has {len(spec)} entries for a rank-{len(shape)} leaf.")
    used: list[str] = []
    for dim, entry in enumerate(spec):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for axis in axes:
            if axis == REPLICA_AXIS:
                raise ValueError(
                    f"{where}: names the 'replica' axis; replicas hold whole copies of the state, "
                    "so a spec may only name 'core'."
                )
            if axis != CORE_AXIS:
                raise ValueError(f"{where}: names the unknown mesh axis {axis!r}; the axis is 'core'.")
            if axis in used:
                raise ValueError(f"{where}: names 'core' for more than one dimension.")
            used.append(axis)
        split = math.prod(core_size for _ in axes)
        if shape[dim] % split:
            raise ValueError(
                f"{where}: dimension {dim} ({shape[dim]}) is not divisible by the {split} cores of a replica."
            )


def leaf_specs(abstract_state: State, rules: Any, core_size: int) -> list[P]:
    """One checked PartitionSpec per leaf of ``abstract_state`` (``jax.tree.leaves`` order).

    Raises:
      ValueError: a spec names an axis other than ``'core'`` (``'replica'`` included),
        has more entries than the leaf's rank, or does not divide the leaf's dimension;
        the message names the leaf, its shape and the rule (or flax metadata).
      TypeError: malformed rules (see ``check_rules``).
    """
    compiled = check_rules(rules)
    boxed = metadata_specs(abstract_state)
    paths = jax.tree_util.tree_flatten_with_path(abstract_state)[0]
    specs = []
    for (path, leaf), box_spec in zip(paths, boxed, strict=True):
        name, shape = key_path_name(path), tuple(getattr(leaf, "shape", ()))
        spec, origin = P(), ""
        if box_spec is not None:
            spec, origin = box_spec, f"flax partitioning metadata {tuple(box_spec)}"
        else:
            for pattern, rule_spec in compiled:
                if pattern.search(name):
                    spec, origin = rule_spec, f"rule ({pattern.pattern!r}, {rule_spec})"
                    break
        if origin:
            _check_spec(name, shape, spec, origin, core_size)
        specs.append(spec)
    return specs


def state_shardings(abstract_state: State, rules: Any, mesh: Mesh | None) -> PyTree:
    """The sharding of each state leaf, as a tree shaped like ``abstract_state``.

    Off the mesh: this process's first device. On a 1-D mesh (one core per replica):
    replicated, the rules only checked. On the 2-D mesh: ``NamedSharding(mesh, spec)``
    per leaf, spec from ``leaf_specs``.

    Raises:
      ValueError, TypeError: as ``leaf_specs``.
    """
    treedef = jax.tree.structure(abstract_state)
    specs = leaf_specs(abstract_state, rules, cores_per_replica(mesh))
    if mesh is None:
        one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.unflatten(treedef, [one] * len(specs))
    if cores_per_replica(mesh) == 1:
        return jax.tree.unflatten(treedef, [replicated(mesh)] * len(specs))
    return jax.tree.unflatten(treedef, [NamedSharding(mesh, s) for s in specs])


def constrain_state(state: State, shardings: PyTree) -> State:
    """Inside the step: pin each leaf of ``state`` to its layout over ``'core'`` (a
    no-op unless the state is sharded), so the loop's carry keeps the rules' layout."""
    if shardings is None:
        return state
    leaves, treedef = jax.tree.flatten(state)
    flat = jax.tree.leaves(shardings)
    if not any(isinstance(s, NamedSharding) and s.spec != P() for s in flat):
        return state
    out = [
        jax.lax.with_sharding_constraint(x, s.spec) if isinstance(s, NamedSharding) and s.spec != P() else x
        for x, s in zip(leaves, flat, strict=True)
    ]
    return jax.tree.unflatten(treedef, out)


def put_state(state: State, shardings: PyTree) -> State:
    """Place a state pytree's leaves on their shardings (a no-op for leaves already
    there, as an init_fn compiled with these output shardings gives)."""
    leaves, treedef = jax.tree.flatten(state)
    targets = jax.tree.leaves(shardings)
    if all(
        isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and x.sharding == t
        for x, t in zip(leaves, targets, strict=True)
    ):
        return state  # already there: device_put would cost a dispatch per leaf for nothing
    return jax.tree.unflatten(treedef, jax.device_put(leaves, targets))


def with_sharding_constraint(x: Any, spec: P) -> Any:
    """Lay an activation out over the cores of a replica, inside model_fn.

    ``jax.lax.with_sharding_constraint(x, spec)`` (on every array of the pytree ``x``)
    when model_fn is traced on a mesh whose ``'core'`` axis has more than one device
    (``num_cores_per_replica`` > 1); ``x`` unchanged otherwise (one core per replica,
    ``Estimator``, ``use_tpu=False``, exports), as TF's ``xla_sharding.split`` has no
    effect off the TPU, so one model_fn runs on every topology.

    Args:
      x: an array or pytree of arrays.
      spec: a PartitionSpec over ``'core'`` (e.g. ``P(None, 'core')`` splits the last
        dimension of a ``[batch, features]`` activation), one entry per dimension at most.

    Returns:
      ``x``, constrained where the mesh has cores.
    """
    if dict(jax.sharding.get_abstract_mesh().shape).get(CORE_AXIS, 1) <= 1:
        return x
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, spec), x)
