"""Write a JAX serving function and its state as a TF1-style SavedModel.

This is the jaxspec counterpart of ``tf.estimator.Estimator.export_saved_model`` for the
PREDICT mode: a ``tf.compat.v1`` graph holds the serving input receiver, one
``tf.Variable`` per state leaf, the serving function converted with ``jax2tf`` (native
serialization: one ``XlaCallModule`` op, batch dimension symbolic), and the signatures
tf.estimator would write. The directory layout follows TF: ``<base>/temp-…`` while
writing, then renamed to ``<base>/<unix seconds>``.
"""

from __future__ import annotations

import json
import os
import string
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import tensorflow as tf
from jax.experimental import jax2tf

from jaxspec.export.export_output import ExportOutput
from tf_bridge import _signatures

EXPORT_RECORD = "jaxspec_export.json"
ASSETS_EXTRA = "assets.extra"
_MAX_TIMESTAMP_BUMPS = 100
_FIRST_CHARS = frozenset(string.ascii_letters + string.digits + ".")
_NAME_CHARS = _FIRST_CHARS | {"_", "-"}


def _leaf_name(path: tuple[Any, ...]) -> str:
    """``params/Dense_0/kernel`` from a key path; characters TF refuses in op names → ``_``."""
    raw = jax.tree_util.keystr(path, simple=True, separator="/") if path else "state"
    parts = ["".join(c if c in _NAME_CHARS else "_" for c in part) or "_" for part in raw.split("/")]
    name = "/".join(parts)
    return name if name[0] in _FIRST_CHARS else f"v{name}"


def _state_leaves(state: Any) -> tuple[list[tuple[str, np.ndarray]], Any]:
    """(name, host value) per state leaf in flattening order, and the tree definition.

    Values get the dtype JAX would give them (``jax.dtypes.canonicalize_dtype``), so the
    variables hold exactly what serving_fn sees.

    Raises:
      TypeError: a leaf is not an array or number (e.g. a typed PRNG key or a string).
      ValueError: two leaves map to the same variable name.
    """
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    leaves: list[tuple[str, np.ndarray]] = []
    seen: dict[str, str] = {}
    for path, leaf in with_paths:
        where = jax.tree_util.keystr(path) or "state"
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            raise TypeError(
                f"state leaf {where} has dtype {dtype}, which TF cannot hold; store "
                "jax.random.key_data(key) in the state instead."
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
        name = _leaf_name(path)
        if name in seen:
            raise ValueError(f"state leaves {seen[name]} and {where} would both be variable {name!r}.")
        seen[name] = where
        leaves.append((name, value))
    return leaves, treedef


def _make_variables(
    leaves: Sequence[tuple[str, np.ndarray]], global_step: int | None
) -> list[tuple[Any, np.ndarray]]:
    """One resource variable per leaf, initialised by a zero fill (the real values are fed
    into the initializer in the session, so no value is stored in the graph)."""
    made: list[tuple[Any, np.ndarray]] = []
    if global_step is not None:
        if any(name == "global_step" for name, _ in leaves):
            raise ValueError("a state leaf is named 'global_step', which global_step= also needs.")
        step = tf.compat.v1.train.get_or_create_global_step()
        made.append((step, np.asarray(global_step, np.int64)))
    for name, value in leaves:
        dtype = tf.as_dtype(value.dtype)
        zeros = tf.fill(tf.constant(value.shape, tf.int64), tf.zeros([], dtype))
        var = tf.compat.v1.Variable(
            zeros, name=name, dtype=dtype, trainable=dtype.is_floating, use_resource=True
        )
        if var.op.name != name:
            raise ValueError(f"variable name {name!r} is taken in the graph (got {var.op.name!r}).")
        made.append((var, value))
    return made


def _feature_specs(features: Any) -> Any:
    """The polymorphic shape specs for the receiver's features (``b`` = the batch axis;
    unknown inner dimensions get their own symbols).

    Raises:
      TypeError: a feature is sparse / ragged, or a string (JAX has no strings).
      ValueError: a feature has an unknown rank.
    """
    counter = iter(range(1 << 30))

    def spec(path: Any, t: Any) -> str | None:
        where = jax.tree_util.keystr(path) or "features"
        if not isinstance(t, tf.Tensor):
            raise TypeError(
                f"feature {where} is a {type(t).__name__}; serving_fn takes dense tensors only "
                "(densify sparse or ragged features in the serving_input_receiver_fn)."
            )
        if t.dtype == tf.string:
            raise TypeError(f"feature {where} is a string tensor; JAX has no strings.")
        if t.shape.rank is None:
            raise ValueError(f"feature {where} has an unknown rank.")
        if t.shape.rank == 0:
            return None
        dims = ["b"] + [str(d) if d is not None else f"d{next(counter)}" for d in t.shape[1:]]
        return "(" + ", ".join(dims) + ")"

    return jax.tree_util.tree_map_with_path(spec, features)


def _call_module_info(graph: tf.Graph) -> dict[str, Any]:
    """Serialization version and platforms of the XlaCallModule ops jax2tf wrote."""
    ops = [op for op in graph.get_operations() if op.type == "XlaCallModule"]
    versions = sorted({int(op.get_attr("version")) for op in ops})
    platforms = sorted(
        {p.decode() if isinstance(p, bytes) else p for op in ops for p in op.get_attr("platforms")}
    )
    return {"xla_call_module_versions": versions, "platforms": platforms}


def _copy_assets_extra(
    export_dir: str, assets_extra: Mapping[str, Any] | None, record: dict[str, Any]
) -> None:
    """Copy ``assets_extra`` (dest relative path → source) and write the export record."""
    extra_dir = os.path.join(export_dir, ASSETS_EXTRA)
    tf.io.gfile.makedirs(extra_dir)
    for dest, source in (assets_extra or {}).items():
        target = os.path.join(extra_dir, dest)
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(os.fsdecode(source), target, overwrite=False)
    with tf.io.gfile.GFile(os.path.join(extra_dir, EXPORT_RECORD), "w") as f:
        f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _check_assets_extra(assets_extra: Any) -> None:
    if assets_extra is None:
        return
    if not isinstance(assets_extra, Mapping):
        raise ValueError(
            f"assets_extra has to be a dict of relative path to source; got {type(assets_extra).__name__}."
        )
    for dest, source in assets_extra.items():
        dest = os.fsdecode(dest)
        parts = dest.replace("\\", "/").split("/")
        if os.path.isabs(dest) or ".." in parts or not dest or dest == EXPORT_RECORD:
            raise ValueError(
                f"assets_extra destination {dest!r} has to be a relative path inside assets.extra/."
            )
        if not tf.io.gfile.exists(os.fsdecode(source)):
            raise ValueError(f"assets_extra source {os.fsdecode(source)!r} does not exist.")


def _move_to_timestamp(base: str, temp_dir: str) -> str:
    """Rename ``temp_dir`` to ``base/<int(time.time())>``, one second later per taken name
    (TF waits for the next second instead; the result is the same kind of name)."""
    stamp = int(time.time())
    for _ in range(_MAX_TIMESTAMP_BUMPS):
        final = os.path.join(base, str(stamp))
        if not tf.io.gfile.exists(final):
            try:
                tf.io.gfile.rename(temp_dir, final, overwrite=False)
                return final
            except tf.errors.AlreadyExistsError:
                pass
        stamp += 1
    raise RuntimeError(f"no free timestamped export directory under {base!r}.")


def _versions() -> dict[str, Any]:
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "tensorflow": tf.__version__,
        "jax_export_calling_convention_version": int(jax.config.jax_export_calling_convention_version),
        "jax_export_supported_calling_convention_versions": [
            int(jax.export.minimum_supported_calling_convention_version),
            int(jax.export.maximum_supported_calling_convention_version),
        ],
    }


def export_saved_model(
    export_dir_base: str | bytes | os.PathLike[str],
    serving_input_receiver_fn: Callable[[], Any],
    serving_fn: Callable[[Any, Any], Mapping[str, Mapping[str, Any]]],
    state: Any,
    heads: Mapping[str, ExportOutput],
    *,
    assets_extra: Mapping[str, Any] | None = None,
    as_text: bool = False,
    global_step: int | None = None,
    platforms: Sequence[str] | None = None,
) -> bytes:
    """Export ``serving_fn`` and ``state`` as a SavedModel for TF Serving
    (``tf.estimator.Estimator.export_saved_model``, PREDICT mode, tag ``serve``).

    Args:
      export_dir_base: the directory under which ``<timestamp>/`` is made.
      serving_input_receiver_fn: no-argument function returning a ``ServingInputReceiver``
        or ``TensorServingInputReceiver`` (see ``tf_bridge.receivers``); called inside the
        export's ``tf.compat.v1`` graph.
      serving_fn: pure JAX ``serving_fn(state, features) -> {head: {output key: array}}``;
        ``features`` has the receiver's structure (dict of arrays, or one array), each
        ``[batch, ...]`` with the batch size symbolic. A classification head returns
        ``scores`` (float ``[batch, K]``) and/or integer ``classes``; a regression head
        ``{'outputs': float [batch] or [batch, 1]}``; a predict head any dict of arrays.
      state: pytree of arrays; each leaf becomes a variable named by its key path
        (``params/Dense_0/kernel``), holding the leaf's value with JAX's dtype.
      heads: dict of signature key → ClassificationOutput / RegressionOutput /
        PredictOutput; gives each head's kind and a classification head's static class
        vocabulary (tiled to ``[batch, K]`` strings; integer ids go through
        ``tf.strings.as_string`` instead).
      assets_extra: dict of destination path (relative, inside ``assets.extra/``) → source
        file, copied as TF does.
      as_text: write ``saved_model.pbtxt`` instead of ``saved_model.pb``.
      global_step: if given, an int64 ``global_step`` variable holding it (as TF's).
      platforms: JAX platforms to lower for (e.g. ``('cpu', 'cuda')``); None lowers for
        JAX's default backend only, jax2tf's default. A TF without that device cannot
        run the model. (Not a tf.estimator argument.)

    Returns:
      The export directory ``<export_dir_base>/<unix seconds>`` as bytes (TF returns
      bytes too). If that name is taken the next free second is used. It also holds
      ``assets.extra/jaxspec_export.json``: jax/jaxlib/tensorflow versions, the
      XlaCallModule serialization version(s) and platforms, and the signatures written.

    Raises:
      ValueError: bad heads / receiver / assets_extra, serving_fn outputs that do not fit
        the heads, or clashing variable names.
      TypeError: a state leaf that is not numeric, or a sparse, ragged or string feature.

    Signatures a head cannot have (classify/regress without a single string receiver
    tensor, outputs not computable from the inputs) are left out with a warning, as TF
    does. The model is written to ``<export_dir_base>/temp-…`` and renamed when complete;
    on any error the temporary directory is removed.
    """
    heads = _signatures.check_heads(heads)
    _check_assets_extra(assets_extra)
    leaves, treedef = _state_leaves(state)
    base = os.fsdecode(export_dir_base)
    tf.io.gfile.makedirs(base)
    temp_dir = os.path.join(base, f"temp-{int(time.time())}-{uuid.uuid4().hex[:8]}")
    try:
        graph = tf.Graph()
        with graph.as_default():
            variables = _make_variables(leaves, global_step)
            receiver = serving_input_receiver_fn()
            if not all(hasattr(receiver, a) for a in ("features", "receiver_tensors")):
                raise ValueError(
                    "serving_input_receiver_fn has to return a ServingInputReceiver or "
                    f"TensorServingInputReceiver; got {type(receiver).__name__}."
                )
            features = receiver.features
            feature_specs = _feature_specs(features)
            state_vars = [var for var, _ in variables[len(variables) - len(leaves) :]]

            def flat_serving_fn(flat_state: list[Any], feats: Any) -> Any:
                return serving_fn(jax.tree_util.tree_unflatten(treedef, flat_state), feats)

            converted = jax2tf.convert(
                flat_serving_fn,
                polymorphic_shapes=[None, feature_specs],
                with_gradient=False,
                native_serialization_platforms=tuple(platforms) if platforms is not None else None,
            )
            outputs = converted([var.value() for var in state_vars], features)
            batch_of = tf.nest.flatten(features)[0]
            tensors = _signatures.head_tensors(heads, outputs, batch_of)
            signatures, excluded = _signatures.signature_defs(
                receiver.receiver_tensors,
                getattr(receiver, "receiver_tensors_alternatives", None),
                heads,
                tensors,
            )
            init_op = tf.group(
                tf.compat.v1.local_variables_initializer(),
                tf.compat.v1.tables_initializer(),
                name="jaxspec_init_op",
            )
            # The session only assigns and saves variables: keep it off GPUs (a GPU build
            # of TF would otherwise grab their memory next to JAX).
            config = tf.compat.v1.ConfigProto(device_count={"GPU": 0})
            with tf.compat.v1.Session(graph=graph, config=config) as session:
                for var, value in variables:
                    session.run(var.initializer, {var.initial_value: value})
                builder = tf.compat.v1.saved_model.Builder(temp_dir)
                builder.add_meta_graph_and_variables(
                    session,
                    [tf.saved_model.SERVING],
                    signature_def_map=signatures,
                    assets_collection=graph.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                    main_op=init_op,
                    strip_default_attrs=True,
                )
                builder.save(as_text=as_text)
        record = {
            **_versions(),
            **_call_module_info(graph),
            "jax2tf_native_serialization": True,
            "polymorphic_shapes": {
                jax.tree_util.keystr(p, simple=True, separator="/") or "features": spec
                for p, spec in jax.tree_util.tree_flatten_with_path(feature_specs)[0]
            },
            "signatures": {key: sig.method_name for key, sig in sorted(signatures.items())},
            "signatures_left_out": excluded,
            "variables": [name for name, _ in leaves],
            "global_step": None if global_step is None else int(global_step),
        }
        _copy_assets_extra(temp_dir, assets_extra, record)
        final = _move_to_timestamp(base, temp_dir)
    except BaseException:
        if tf.io.gfile.exists(temp_dir):
            tf.io.gfile.rmtree(temp_dir)
        raise
    return tf.compat.as_bytes(final)
