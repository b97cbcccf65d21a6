"""A TF-free serving artifact beside the SavedModel: ``<export_dir>/jax/``.

Per serving signature, a ``jax.export`` function (StableHLO, batch dimension symbolic as
in the SavedModel) serialized to ``signature_<i>.jax``; the state leaves it reads in
``weights.npz`` (numpy's uncompressed zip of ``.npy`` files, one per variable name); and
``serving.json``, which names the format and its version, the JAX that wrote it, each
signature's inputs and outputs, and the global step. ``load_serving`` reads it back with
JAX and numpy only: no TensorFlow.

A signature's function takes what the SavedModel's signature takes when its receiver
tensors are the model's features (``build_raw_serving_input_receiver_fn``): a dict of
named arrays. A parsing receiver (serialized ``tf.Example``s) runs TF ops StableHLO
cannot hold; for such a signature the function takes the parsed features instead, under
their feature keys (``'feature'`` for a single feature tensor), and ``serving.json``
says so (``"inputs_are": "features"``). String outputs (class names) are made on the
host with numpy from the vocabulary recorded in ``serving.json``, as bytes, as TF gives them.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxspec.export.export_output import ClassificationOutput, ExportOutput, PredictOutput, RegressionOutput
from jaxspec.export.slim import ExportFn, keep_leaves, leaves_read

DIRECTORY = "jax"
MANIFEST = "serving.json"
WEIGHTS = "weights.npz"
FORMAT = "jaxspec.jax_serving"
FORMAT_VERSION = 1


class _ArtifactRules:
    """Per kind of head: the outputs the JAX function returns, and how each signature
    output is made from them (the rules ``tf_bridge.export.signatures`` applies in the
    graph)."""

    def __init__(self, out: Mapping[str, object]) -> None:
        self.out = out

    def regression(self, head: RegressionOutput) -> tuple[list[str], list[dict[str, Any]]]:
        return ["outputs"], [{"name": "outputs", "from": "outputs"}]

    def classification(self, head: ClassificationOutput) -> tuple[list[str], list[dict[str, Any]]]:
        out = self.out
        computed = [k for k in ("scores", "classes") if k in out]
        rules: list[dict[str, Any]] = [{"name": "scores", "from": "scores"}] if "scores" in out else []
        vocab = head.class_vocabulary
        if vocab is not None:
            rules.append({"name": "classes", "tile": np.asarray(vocab).astype(str).tolist()})
        elif "classes" in out:
            rules.append({"name": "classes", "from": "classes", "as_string": True})
        return computed, rules

    def predict(self, head: PredictOutput) -> tuple[list[str], list[dict[str, Any]]]:
        names = getattr(head, "class_names", {})
        rules = []
        for key in self.out:
            rule: dict[str, Any] = {"name": key, "from": key}
            if key in names:
                rule["gather"] = np.asarray(names[key]).astype(str).tolist()
            rules.append(rule)
        return list(self.out), rules


def _serve_fn(
    predict: ExportFn,
    treedef: jax.tree_util.PyTreeDef,
    head_key: str,
    head: ExportOutput,
    computed: list[str],
    inputs: Mapping[str, int],
    features_def: jax.tree_util.PyTreeDef,
) -> Callable[..., dict[str, jax.Array]]:
    by_index = {i: name for name, i in inputs.items()}

    def serve(weights: list[jax.Array], step: ArrayLike, named: dict[str, jax.Array]) -> dict[str, jax.Array]:
        features = jax.tree_util.tree_unflatten(
            features_def, [named[by_index[i]] for i in range(len(by_index))]
        )
        out = predict(jax.tree_util.tree_unflatten(treedef, weights), step, features, None)["heads"][head_key]
        result = {k: out[k] for k in computed}
        for k in head.float32_keys:  # float32, as TF Serving's classify/regress take
            if k in result and jnp.issubdtype(result[k].dtype, jnp.floating):
                result[k] = result[k].astype(jnp.float32)
        return result

    return serve


def _canonical(value: ArrayLike) -> np.ndarray:
    """``value`` on the host with the dtype JAX gives it (as the SavedModel's variables)."""
    array = np.asarray(value)
    return array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False)


def serving_files(
    predict: ExportFn,
    state: Any,
    names: Sequence[str],
    global_step: int | None,
    heads: Mapping[str, ExportOutput],
    features: Any,
    feature_shapes: Any,
    signatures: Mapping[str, tuple[str, Mapping[str, int], str]],
    platforms: Sequence[str],
) -> dict[str, bytes]:
    """The artifact's files (relative path -> bytes), for the SavedModel writer to write.

    Args:
      predict: the PREDICT export function ``fn(state, global_step, features, None)``
        returning ``{'heads': {head: {key: array}}}`` (as the SavedModel converts it).
      state: the exported state (arrays; no typed PRNG keys).
      names: the variable name of each leaf of ``state`` (``tree_leaves`` order).
      global_step: the checkpoint's step (the function's int32 ``global_step``), or None (0).
      heads: signature-ready heads (checked by the SavedModel writer).
      features: example features at batch 1 (numpy pytree, the receiver's structure).
      feature_shapes: per feature leaf a ``jax.export`` shape spec (``'(b, 64)'``; the
        batch symbol ``b`` shared) or None for a static shape.
      signatures: ``{signature key: (head key, {input name: feature leaf index},
        inputs_are)}``, ``inputs_are`` being ``'receiver_tensors'`` or ``'features'``.
      platforms: ``jax.export`` platforms (``'cpu'``, ``'cuda'``, ...).

    Raises:
      ValueError: JAX cannot export the function (e.g. a host callback in PREDICT).
    """
    step = np.int32(0 if global_step is None else global_step)
    read = leaves_read(predict, state, step, features, None)
    slim = keep_leaves(state, {"predict": predict}, read)
    weights = [_canonical(v) for v, r in zip(jax.tree_util.tree_leaves(state), read, strict=True) if r]
    kept = [n for n, r in zip(names, read, strict=True) if r]
    treedef = jax.tree_util.tree_structure(slim.state)
    feature_leaves, features_def = jax.tree_util.tree_flatten(features)
    # The dtypes JAX computes with (int64 inputs are int32 without jax_enable_x64).
    feature_leaves = [_canonical(v) for v in feature_leaves]
    spec_leaves = jax.tree_util.tree_leaves(feature_shapes, is_leaf=lambda x: x is None)
    heads_out = jax.eval_shape(lambda s, f: slim.fns["predict"](s, step, f, None), slim.state, features)[
        "heads"
    ]
    files: dict[str, bytes] = {}
    described = {}
    for i, (key, (head_key, inputs, inputs_are)) in enumerate(signatures.items()):
        computed, rules = heads[head_key].accept(_ArtifactRules(heads_out[head_key]))
        serve = _serve_fn(
            slim.fns["predict"], treedef, head_key, heads[head_key], computed, inputs, features_def
        )
        example = {name: feature_leaves[j] for name, j in inputs.items()}
        shapes = {name: spec_leaves[j] for name, j in inputs.items()}
        specs = jax.export.symbolic_args_specs((weights, step, example), (None, None, shapes))
        exported = jax.export.export(jax.jit(serve), platforms=tuple(platforms))(*specs)
        files[f"signature_{i}.jax"] = bytes(exported.serialize())
        described[key] = {
            "file": f"signature_{i}.jax",
            "head": head_key,
            "inputs": {name: str(value.dtype) for name, value in example.items()},
            "input_shapes": shapes,
            "inputs_are": inputs_are,
            "rows_of": next(name for name, j in inputs.items() if j == 0),
            "outputs": rules,
            "calling_convention_version": exported.calling_convention_version,
            "platforms": list(exported.platforms),
        }
    buffer = io.BytesIO()
    np.savez(buffer, **dict(zip(kept, weights, strict=True)))  # type: ignore[arg-type]  # numpy's stub: ** may be allow_pickle
    files[WEIGHTS] = buffer.getvalue()
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "jax_version": jax.__version__,
        "global_step": None if global_step is None else int(global_step),
        # npz keeps the bytes of ml_dtypes' types (bfloat16, float8) but not their names
        "weight_dtypes": {name: str(w.dtype) for name, w in zip(kept, weights, strict=True)},
        "weights": kept,
        "signatures": described,
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return files


class ServingFunction:
    """One signature of a ``jax/`` artifact: ``fn({input name: array}) -> {output name:
    numpy array}``, as the SavedModel signature of the same key (string outputs as numpy
    object arrays of bytes, as TF's ``.numpy()`` gives them).

    Attributes:
      inputs: ``{input name: dtype name}``.
      input_shapes: ``{input name: shape spec}`` (``'(b, 64)'``: ``b`` is any batch size).
      inputs_are: ``'receiver_tensors'`` (the signature's own inputs) or ``'features'``
        (a parsing receiver's parsed features: see the module's docstring).
    """

    def __init__(
        self,
        exported: jax.export.Exported,
        weights: list[jax.Array],
        step: np.int32,
        described: Mapping[str, Any],
    ):
        self._call = jax.jit(exported.call)
        self._weights = weights
        self._step = step
        self._outputs = described["outputs"]
        self._rows_of = described["rows_of"]
        self.inputs: dict[str, str] = dict(described["inputs"])
        self.input_shapes: dict[str, Any] = dict(described["input_shapes"])
        self.inputs_are: str = described["inputs_are"]

    def __call__(self, inputs: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
        """Run the signature on ``inputs`` (numpy or JAX arrays; cast to each input's dtype).

        Raises:
          TypeError: a missing or unexpected input name (as a TF signature call).
          ValueError: an input's shape does not fit its spec (from ``jax.export``).
        """
        missing, extra = set(self.inputs) - set(inputs), set(inputs) - set(self.inputs)
        if missing or extra:
            raise TypeError(
                f"the signature takes inputs {sorted(self.inputs)}; missing {sorted(missing)}, "
                f"unexpected {sorted(extra)}."
            )
        named = {k: np.asarray(inputs[k], dtype=self.inputs[k]) for k in self.inputs}
        computed = {k: np.asarray(v) for k, v in self._call(self._weights, self._step, named).items()}
        rows = named[self._rows_of].shape[0]
        return {rule["name"]: _made(rule, computed, rows) for rule in self._outputs}


def _made(rule: Mapping[str, Any], computed: Mapping[str, np.ndarray], rows: int) -> np.ndarray:
    """One signature output from the function's outputs (strings as bytes, as TF)."""
    if "tile" in rule:
        vocab = np.array([v.encode() for v in rule["tile"]], dtype=object)
        rows = computed["scores"].shape[0] if "scores" in computed else rows
        return np.tile(vocab.reshape(1, -1), (rows, 1))
    value = computed[rule["from"]]
    if rule.get("as_string"):
        return np.vectorize(lambda v: str(v).encode(), otypes=[object])(value)
    if "gather" in rule:
        return np.array([v.encode() for v in rule["gather"]], dtype=object)[value]
    return value


def _check_versions(manifest: Mapping[str, Any], where: str) -> None:
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{where} is not a jaxspec serving manifest (format {manifest.get('format')!r}).")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where} has format_version {version!r}; this jaxspec reads up to {FORMAT_VERSION} "
            f"(written with JAX {manifest.get('jax_version')}, installed {jax.__version__})."
        )
    low = jax.export.minimum_supported_calling_convention_version
    high = jax.export.maximum_supported_calling_convention_version
    for key, sig in manifest["signatures"].items():
        v = sig["calling_convention_version"]
        if not low <= v <= high:
            raise ValueError(
                f"signature {key!r} of {where} was serialized with jax.export calling convention "
                f"{v} (JAX {manifest.get('jax_version')}); the installed JAX {jax.__version__} "
                f"runs {low} to {high}."
            )


def _stored_weight(value: np.ndarray, dtype: str | None) -> np.ndarray:
    """A weight read from weights.npz with the dtype it was written with: npz reads a
    bfloat16 (or other ml_dtypes) array back as raw void bytes of the same width."""
    if dtype is None or str(value.dtype) == dtype:
        return value
    return value.view(jnp.dtype(dtype))


def load_serving(export_dir: str | bytes | os.PathLike[str]) -> dict[str, ServingFunction]:
    """The serving signatures of an export written with ``jax_artifact=True``, run by
    JAX alone (TensorFlow is not imported).

    Args:
      export_dir: the export directory (``<export_dir_base>/<timestamp>``, str or bytes as
        ``export_saved_model`` returns it); its ``jax/`` subdirectory is read (local path).

    Returns:
      ``{signature key: ServingFunction}``: the SavedModel's serving signatures (the
      ``serve`` meta graph's); each takes ``{input name: array}`` and returns
      ``{output name: numpy array}``.

    Raises:
      FileNotFoundError: the export has no ``jax/serving.json`` (written without
        ``jax_artifact=True``).
      ValueError: the artifact's format version is newer than this jaxspec reads, or a
        function's calling convention is outside what the installed JAX runs.
    """
    root = os.path.join(os.fsdecode(export_dir), DIRECTORY)
    where = os.path.join(root, MANIFEST)
    with open(where) as f:
        manifest = json.load(f)
    _check_versions(manifest, where)
    with np.load(os.path.join(root, WEIGHTS)) as stored:
        dtypes = manifest.get("weight_dtypes", {})
        weights = jax.device_put(
            [_stored_weight(stored[name], dtypes.get(name)) for name in manifest["weights"]]
        )
    step = np.int32(manifest["global_step"] or 0)
    loaded = {}
    for key, sig in manifest["signatures"].items():
        with open(os.path.join(root, sig["file"]), "rb") as f:
            exported = jax.export.deserialize(bytearray(f.read()))
        loaded[key] = ServingFunction(exported, weights, step, sig)
    return loaded
