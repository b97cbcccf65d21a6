"""The pieces every exported graph shares: state variables, polymorphic shapes, jax2tf.

The model state becomes one ``tf.Variable`` per pytree leaf (named by its key path), the
JAX function one ``XlaCallModule`` op (jax2tf native serialization) whose batch dimension
is symbolic, so the SavedModel serves any batch size.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from jax.experimental import jax2tf

from jaxspec.export.slim import ExportFn
from jaxspec.spec.fn_types import ArrayLike, PyTree

_FIRST_CHARS = frozenset(string.ascii_letters + string.digits + ".")
_NAME_CHARS = _FIRST_CHARS | {"_", "-"}
BATCH_SYMBOL = "b"
TRAINABLE_ROOT = "params"


def leaf_name(path: jax.tree_util.KeyPath, root: str = "state") -> str:
    """``params/Dense_0/kernel`` from a key path; characters TF refuses in op names → ``_``."""
    raw = jax.tree_util.keystr(path, simple=True, separator="/") if path else root
    parts = ["".join(c if c in _NAME_CHARS else "_" for c in part) or "_" for part in raw.split("/")]
    name = "/".join(parts)
    return name if name[0] in _FIRST_CHARS else f"v{name}"


def _is_typed_key(leaf: object) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def without_prng_keys(state: PyTree, fns: Mapping[str, ExportFn]) -> tuple[PyTree, dict[str, ExportFn]]:
    """The state without its typed PRNG key leaves (``jax.random.key``, flax.nnx's
    ``Rngs``), and each of ``fns`` wrapped to get them back.

    A serving graph has no use for a random stream, and TF cannot hold a typed key in a
    variable: the keys become constants of the JAX function (the checkpoint's values)
    instead of variables, and a TRAIN function's ``new_state`` leaves them out, so the
    key does not advance in a SavedModel's train_op. ``fns`` maps a mode to
    ``fn(state, step, features, labels) -> dict``; a state without keys comes back as it is.
    """
    leaves, treedef = jax.tree_util.tree_flatten(state)
    is_key = [_is_typed_key(leaf) for leaf in leaves]
    if not any(is_key):
        return state, dict(fns)
    keys = {
        i: (jax.random.key_impl(leaf), np.asarray(jax.random.key_data(leaf)))
        for i, leaf in enumerate(leaves)
        if is_key[i]
    }
    stripped = jax.tree_util.tree_unflatten(
        treedef, [None if k else leaf for leaf, k in zip(leaves, is_key, strict=True)]
    )

    def full(tree: PyTree) -> PyTree:
        rest = iter(jax.tree_util.tree_leaves(tree))
        return jax.tree_util.tree_unflatten(
            treedef,
            [
                jax.random.wrap_key_data(jnp.asarray(keys[i][1]), impl=keys[i][0]) if k else next(rest)
                for i, k in enumerate(is_key)
            ],
        )

    def strip(tree: PyTree) -> PyTree:
        flat, tdef = jax.tree_util.tree_flatten(tree)
        return jax.tree_util.tree_unflatten(tdef, [None if _is_typed_key(leaf) else leaf for leaf in flat])

    def wrap(fn: ExportFn) -> ExportFn:
        def no_keys(state: PyTree, step: ArrayLike, features: PyTree, labels: PyTree) -> PyTree:
            out = fn(full(state), step, features, labels)
            return {**out, "new_state": strip(out["new_state"])} if "new_state" in out else out

        return no_keys

    return stripped, {mode: wrap(fn) for mode, fn in fns.items()}


def state_leaves(state: PyTree) -> tuple[list[tuple[str, np.ndarray]], jax.tree_util.PyTreeDef]:
    """(name, host value) per state leaf in flattening order, and the tree definition.

    Values get the dtype JAX would give them (``jax.dtypes.canonicalize_dtype``), so the
    variables hold exactly what the JAX function sees.

    Raises:
      TypeError: a leaf is not an array or number (e.g. a typed PRNG key or a string).
      ValueError: two leaves map to the same variable name, or a leaf is not fully
        addressable from this process.
    """
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    leaves: list[tuple[str, np.ndarray]] = []
    seen: dict[str, str] = {}
    for path, leaf in with_paths:
        where = jax.tree_util.keystr(path) or "state"
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            raise TypeError(
                f"state leaf {where} has dtype {dtype}, which TF cannot hold (typed PRNG keys "
                "are left out by without_prng_keys; other extended dtypes are not)."
            )
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            raise ValueError(
                f"state leaf {where} is not fully addressable from this process; gather it "
                "first (jax.experimental.multihost_utils.process_allgather)."
            )
        try:
            value = np.asarray(jax.device_get(leaf))
        except (TypeError, ValueError) as err:
            raise TypeError(f"state leaf {where} is not an array: {type(leaf).__name__}.") from err
        if not (jax.dtypes.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
            raise TypeError(f"state leaf {where} has dtype {value.dtype}, which is not numeric.")
        value = value.astype(jax.dtypes.canonicalize_dtype(value.dtype), copy=False)
        name = leaf_name(path)
        if name in seen:
            raise ValueError(f"state leaves {seen[name]} and {where} would both be variable {name!r}.")
        seen[name] = where
        leaves.append((name, value))
    return leaves, treedef


def _trainable(name: str, value: np.ndarray, has_params: bool) -> bool:
    """Float leaves are trainable; when the state has a ``params`` subtree (a flax
    TrainState, ``{'params': ...}``) only the leaves under it are (optimizer slots and
    counters are not, as in TF)."""
    if not jax.dtypes.issubdtype(value.dtype, np.floating):
        return False
    return not has_params or name == TRAINABLE_ROOT or name.startswith(TRAINABLE_ROOT + "/")


def make_variables(
    leaves: Sequence[tuple[str, np.ndarray]], global_step: int | None
) -> tuple[tf.Variable | None, list[tf.Variable]]:
    """The step variable (int64 ``global_step``, or None) and one resource variable per
    leaf, in the current graph. Each starts as a zero fill: the real values are fed to
    the initializers in a session, so no state value is stored in the graph.

    Raises:
      ValueError: a leaf is named ``global_step`` while a step variable is made, or a
        name is taken in the graph.
    """
    step = None
    if global_step is not None:
        if any(name == "global_step" for name, _ in leaves):
            raise ValueError("a state leaf is named 'global_step', which global_step= also needs.")
        step = tf.compat.v1.train.get_or_create_global_step()
    has_params = any(n == TRAINABLE_ROOT or n.startswith(TRAINABLE_ROOT + "/") for n, _ in leaves)
    made = []
    for name, value in leaves:
        dtype = tf.as_dtype(value.dtype)
        zeros = tf.fill(tf.constant(value.shape, tf.int64), tf.zeros([], dtype))
        var = tf.compat.v1.Variable(
            zeros, name=name, dtype=dtype, trainable=_trainable(name, value, has_params), use_resource=True
        )
        if var.op.name != name:
            raise ValueError(f"variable name {name!r} is taken in the graph (got {var.op.name!r}).")
        made.append(var)
    return step, made


def step_input(step_var: tf.Variable | None) -> tf.Tensor:
    """The int32 global step the JAX function receives (0 without a step variable)."""
    if step_var is None:
        return tf.constant(0, tf.int32)
    return tf.cast(step_var.read_value(), tf.int32)


def shape_specs(tree: PyTree, what: str, counter: Iterator[int]) -> PyTree:
    """jax2tf polymorphic shape specs for the receiver's tensors: an unknown axis 0 is the
    batch symbol ``b`` (shared by features and labels), any other unknown axis gets its
    own symbol; known sizes stay static.

    Raises:
      TypeError: a tensor is sparse / ragged, or a string (JAX has no strings).
      ValueError: a tensor has an unknown rank.
    """

    def spec(path: jax.tree_util.KeyPath, t: object) -> str | None:
        where = what + jax.tree_util.keystr(path)
        if not isinstance(t, tf.Tensor):
            raise TypeError(
                f"{where} is a {type(t).__name__}; the JAX function takes dense tensors only "
                "(densify sparse or ragged tensors in the input receiver fn)."
            )
        if t.dtype == tf.string:
            raise TypeError(f"{where} is a string tensor; JAX has no strings.")
        if t.shape.rank is None:
            raise ValueError(f"{where} has an unknown rank.")
        if t.shape.rank == 0:
            return None
        dims = [t.shape[0] if t.shape[0] is not None else BATCH_SYMBOL]
        dims += [d if d is not None else f"d{next(counter)}" for d in t.shape[1:]]
        return "(" + ", ".join(str(d) for d in dims) + ")"

    return jax.tree_util.tree_map_with_path(spec, tree)


def spec_record(specs: PyTree, root: str) -> dict[str, str | None]:
    """``{'x': '(b, 64)'}`` for the export record."""
    return {
        jax.tree_util.keystr(p, simple=True, separator="/") or root: s
        for p, s in jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: x is None)[0]
    }


def convert(
    fn: Callable[..., PyTree], polymorphic_shapes: Sequence[PyTree], platforms: Sequence[str]
) -> Callable[..., PyTree]:
    """``jax2tf.convert`` with native serialization, no gradient, for ``platforms``."""
    return jax2tf.convert(
        fn,
        polymorphic_shapes=list(polymorphic_shapes),
        with_gradient=False,
        native_serialization_platforms=tuple(platforms),
    )


def default_platforms() -> tuple[str, ...]:
    """``('cpu',)`` plus JAX's default backend when that is an accelerator (``'cuda'``
    for JAX's ``'gpu'``): the model then runs on TF's CPU kernels and on that device."""
    backend = jax.default_backend()
    backend = {"gpu": "cuda"}.get(backend, backend)
    return ("cpu",) if backend == "cpu" else ("cpu", backend)


def call_module_info(graphs: Sequence[tf.Graph]) -> dict[str, list[int] | list[str]]:
    """Serialization version(s) and platforms of the XlaCallModule ops jax2tf wrote."""
    ops = [op for g in graphs for op in g.get_operations() if op.type == "XlaCallModule"]
    versions = sorted({int(op.get_attr("version")) for op in ops})
    platforms = sorted(
        {p.decode() if isinstance(p, bytes) else p for op in ops for p in op.get_attr("platforms")}
    )
    return {"xla_call_module_versions": versions, "platforms": platforms}
