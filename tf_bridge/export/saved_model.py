"""Write JAX functions and their state as a TF1-style SavedModel, as tf.estimator does.

This is the jaxspec counterpart of ``tf.estimator.Estimator.export_saved_model`` and
``experimental_export_all_saved_models``: per mode a ``tf.compat.v1`` graph holds the
input receiver, one ``tf.Variable`` per state leaf, the JAX function converted with
``jax2tf`` (native serialization: one ``XlaCallModule`` op, batch dimension symbolic) and
the signatures tf.estimator writes for that mode (see ``tf_bridge.export.modes``). Up to three
meta graphs (tags ``train``, ``eval``, ``serve``) share one set of variables. The model is
written to ``<base>/temp-…``, loaded back and run once by the installed TensorFlow, and
only then renamed to ``<base>/<unix seconds>``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import numpy as np
import tensorflow as tf
from tensorflow.python.util import deprecation as _deprecation

from jaxspec.export.export_output import ExportOutput
from jaxspec.spec.fn_types import ArrayLike, PyTree
from jaxspec.store import paths
from tf_bridge.export import compat as _compat
from tf_bridge.export import graph as _graph
from tf_bridge.export import modes as _modes
from tf_bridge.export import signatures as _signatures
from tf_bridge.export import validation as _validation
from tf_bridge.export import warmup as _warmup
from tf_bridge.export.modes import ModeExport
from tf_bridge.export.warmup import WarmupRequests

logger = logging.getLogger("tf_bridge")

EXPORT_RECORD = "jaxspec_export.json"
ASSETS_EXTRA = "assets.extra"
MODE_ORDER = (_modes.TRAIN, _modes.EVAL, _modes.PREDICT)
# ``assets_extra``: destination path under ``assets.extra/`` -> the file to copy there.
AssetsExtra: TypeAlias = Mapping[str, str | os.PathLike[str]]
_MAX_TIMESTAMP_BUMPS = 100


def _copy_assets_extra(
    export_dir: str, assets_extra: AssetsExtra | None, record: dict[str, Any] | None
) -> None:
    """Copy ``assets_extra`` (dest relative path → source) and write the export record
    (none when ``record`` is None; no ``assets.extra/`` at all without either)."""
    if not assets_extra and record is None:
        return
    extra_dir = os.path.join(export_dir, ASSETS_EXTRA)
    tf.io.gfile.makedirs(extra_dir)
    for dest, source in (assets_extra or {}).items():
        target = os.path.join(extra_dir, dest)
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(os.fsdecode(source), target, overwrite=False)
    if record is None:
        return
    with tf.io.gfile.GFile(os.path.join(extra_dir, EXPORT_RECORD), "w") as f:
        f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _check_assets_extra(assets_extra: object) -> None:
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


def modes_in_order(modes: Mapping[str, object]) -> list[str]:
    """The ModeKeys values of ``modes`` that have a value, in tf.estimator's order TRAIN,
    EVAL, PREDICT (the first one's meta graph saves the variables); other keys are left
    out, as TF does."""
    return [m for m in MODE_ORDER if modes.get(m) is not None]


def write_export_dir(
    export_dir_base: str | bytes | os.PathLike[str],
    write: Callable[[str], dict[str, Any] | None],
    assets_extra: AssetsExtra | None = None,
    verify: Callable[[str], None] | None = None,
) -> str:
    """Write one export directory atomically, for both SavedModel writers (jaxspec models
    here, TF model_fns in ``tf_bridge.runtime.runner``), as tf.estimator lays it out.

    ``write(temp_dir)`` writes the SavedModel into a fresh ``<base>/temp-…`` and returns
    the export record (written to ``assets.extra/jaxspec_export.json``) or None; then
    ``assets_extra`` (relative destination inside ``assets.extra/`` → source file) is
    copied, ``verify(temp_dir)`` runs if given, and the directory is renamed to
    ``<base>/<unix seconds>`` (the next free second if taken).

    Returns:
      The export directory (str).

    Raises:
      ValueError: ``assets_extra`` is not a dict, names a destination outside
        ``assets.extra/`` or a source that does not exist (checked before anything is
        written).
      Whatever ``write`` or ``verify`` raise. On any error the temporary directory (and
      the base, when this call made it) is removed: nothing half-written stays.
    """
    _check_assets_extra(assets_extra)
    base = os.fsdecode(export_dir_base)
    base_is_new = not tf.io.gfile.exists(base)
    tf.io.gfile.makedirs(base)
    temp_dir = os.path.join(base, f"temp-{int(time.time())}-{uuid.uuid4().hex[:8]}")
    try:
        record = write(temp_dir)
        _copy_assets_extra(temp_dir, assets_extra, record)
        if verify is not None:
            verify(temp_dir)
        return _move_to_timestamp(base, temp_dir)
    except BaseException:
        if tf.io.gfile.exists(temp_dir):
            tf.io.gfile.rmtree(temp_dir)
        if base_is_new and not tf.io.gfile.listdir(base):
            tf.io.gfile.rmtree(base)  # a base made for this export goes with it
        raise


def _write(
    temp_dir: str,
    graphs: Sequence[_modes.ModeGraph],
    values: Sequence[np.ndarray],
    global_step: int | None,
    as_text: bool,
) -> None:
    """One builder; the first graph saves the variables (fed their values), the others
    add their meta graph only (tf.estimator's order: TRAIN, EVAL, PREDICT)."""
    builder = tf.compat.v1.saved_model.Builder(temp_dir)
    for i, mg in enumerate(graphs):
        with mg.graph.as_default():
            kwargs = dict(
                signature_def_map=mg.signatures,
                assets_collection=mg.graph.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                main_op=mg.main_op,
                strip_default_attrs=True,
            )
            if i > 0:
                builder.add_meta_graph(mg.tags, **kwargs)
                continue
            # The session only assigns and saves variables: keep it off GPUs (a GPU build
            # of TF would otherwise grab their memory next to JAX).
            config = tf.compat.v1.ConfigProto(device_count={"GPU": 0})
            with tf.compat.v1.Session(graph=mg.graph, config=config) as session:
                if mg.step_var is not None and global_step is not None:
                    session.run(mg.step_var.initializer, {mg.step_var.initial_value: np.int64(global_step)})
                for var, value in zip(mg.state_vars, values, strict=True):
                    session.run(var.initializer, {var.initial_value: value})
                builder.add_meta_graph_and_variables(session, mg.tags, **kwargs)
    builder.save(as_text=as_text)


def _record(
    graphs: Sequence[_modes.ModeGraph], leaves: Sequence[tuple[str, np.ndarray]], global_step: int | None
) -> dict[str, Any]:
    main = next((g for g in graphs if g.mode == _modes.PREDICT), graphs[0])
    return {
        **_compat.versions(),
        **_graph.call_module_info([g.graph for g in graphs]),
        "jax2tf_native_serialization": True,
        "polymorphic_shapes": main.shapes,
        "signatures": {key: sig.method_name for key, sig in sorted(main.signatures.items())},
        "signatures_left_out": main.excluded,
        "meta_graphs": {
            ",".join(g.tags): {
                "mode": g.mode,
                "polymorphic_shapes": g.shapes,
                "signatures": {key: sig.method_name for key, sig in sorted(g.signatures.items())},
                "signatures_left_out": g.excluded,
            }
            for g in graphs
        },
        "variables": [name for name, _ in leaves],
        "global_step": None if global_step is None else int(global_step),
    }


def _write_jax_artifact(
    temp_dir: str,
    graphs: Sequence[_modes.ModeGraph],
    modes: Mapping[str, ModeExport],
    state: PyTree,
    leaves: Sequence[tuple[str, np.ndarray]],
    global_step: int | None,
    platforms: Sequence[str],
) -> None:
    """``<export>/jax/``: jaxspec's TF-free serving artifact (``jaxspec.export.serving``)."""
    from jaxspec.export.serving import DIRECTORY, serving_files

    main = next((g for g in graphs if g.mode == _modes.PREDICT), None)
    serving = None if main is None else main.serving
    if serving is None or not serving["signatures"]:
        logger.warning("jax_artifact: the export has no serving signature; no jax/ artifact is written.")
        return
    files = serving_files(
        modes[_modes.PREDICT].fn,
        state,
        [name for name, _ in leaves],
        global_step,
        _signatures.check_heads(modes[_modes.PREDICT].heads),
        serving["features"],
        serving["shapes"],
        serving["signatures"],
        platforms,
    )
    tf.io.gfile.makedirs(os.path.join(temp_dir, DIRECTORY))
    for name, data in files.items():
        with tf.io.gfile.GFile(os.path.join(temp_dir, DIRECTORY, name), "wb") as f:
            f.write(data)


def _serving_checks(
    temp_dir: str,
    graphs: Sequence[_modes.ModeGraph],
    predict: ModeExport,
    state: PyTree,
    global_step: int | None,
    jax_artifact: bool,
    warmup_requests: WarmupRequests,
    validate: bool | str,
    tolerances: Mapping[str, float] | None,
    runs_here: bool,
) -> None:
    """Warmup records and the validation report, inside the atomic export (both only
    checked against TF when ``runs_here``: the load check passed)."""
    found = next(g for g in graphs if g.mode == _modes.PREDICT)
    serving = found.serving
    assert serving is not None  # every PREDICT graph carries what serving needs
    example = serving["features"]
    single = not isinstance(example, Mapping)
    example = {"feature": example} if single else dict(example)
    defaults = _warmup.parsed_defaults(temp_dir)
    rows = _warmup.feature_rows(1 if warmup_requests is None else warmup_requests, example, defaults)
    keys = sorted(example)  # the features flattened (sorted keys): main.serving's indices
    names = {
        key: {name: keys[i] for name, i in inputs.items()}
        for key, (_, inputs, inputs_are) in serving["signatures"].items()
        if inputs_are == "receiver_tensors"
    }
    if warmup_requests is not None:
        _warmup.write_warmup(temp_dir, rows, names, replay=runs_here)
    if not (validate and runs_here):
        return
    step = np.int32(0 if global_step is None else global_step)
    heads = jax.jit(lambda s, f: predict.fn(s, step, f, None)["heads"])

    def jax_model(
        key: str, features: dict[str, np.ndarray], feed: dict[str, np.ndarray]
    ) -> Mapping[str, ArrayLike]:
        out = heads(state, features["feature"] if single else features)
        return out[serving["signatures"][key][0]]

    references: dict[str, _validation.Reference] = {"jax": jax_model}
    if jax_artifact and serving["signatures"]:
        from jaxspec.export.serving import load_serving

        served = load_serving(temp_dir)

        def artifact(
            key: str, features: dict[str, np.ndarray], feed: dict[str, np.ndarray]
        ) -> Mapping[str, ArrayLike]:
            fn = served[key]
            return fn(features if fn.inputs_are == "features" else feed)

        references["jax_artifact"] = artifact
    _validation.validate_export(temp_dir, rows, references, validate, tolerances, names)


def export_all_saved_models(
    export_dir_base: str | bytes | os.PathLike[str],
    modes: Mapping[str, ModeExport],
    state: PyTree,
    *,
    assets_extra: AssetsExtra | None = None,
    as_text: bool = False,
    global_step: int | None = None,
    platforms: Sequence[str] | None = None,
    verify: bool = True,
    jax_artifact: bool = False,
    warmup_requests: WarmupRequests = None,
    validate: bool | str = True,
    validation_tolerances: Mapping[str, float] | None = None,
) -> bytes:
    """Export one meta graph per mode and ``state`` as one SavedModel
    (``tf.estimator.Estimator.experimental_export_all_saved_models``).

    Args:
      export_dir_base: the directory under which ``<timestamp>/`` is made.
      modes: ModeKeys value (``'train'``, ``'eval'``, ``'infer'``) → ``ModeExport``
        (receiver fn, JAX function, PREDICT heads). Other keys are ignored, as TF does.
        Tags: ``train``, ``eval``, ``serve``; signatures as tf.estimator writes them
        (``tf_bridge.export.modes``). A mode's receiver tensors with an unknown axis 0 share the
        batch symbol: any batch size serves; other unknown dims get their own symbols.
      state: pytree of arrays; each leaf becomes a variable named by its key path
        (``params/Dense_0/kernel``), holding the leaf's value with JAX's dtype. Only
        float leaves are trainable, and only those under ``params`` when there is one.
        Typed PRNG key leaves (flax.nnx's ``Rngs``, ``jax.random.key``) become no
        variable: the graph uses the state's keys as constants (tf.estimator has no
        such leaves).
      assets_extra: dict of destination path (relative, inside ``assets.extra/``) → source
        file, copied as TF does. Files in the graphs' ``ASSET_FILEPATHS`` collection
        (e.g. vocabularies of lookup tables in a receiver) go to ``assets/``.
      as_text: write ``saved_model.pbtxt`` instead of ``saved_model.pb``.
      global_step: if given, an int64 ``global_step`` variable holding it (as TF's); the
        JAX function gets it as ``global_step`` (else 0), TRAIN's train_op adds 1.
      platforms: JAX platforms to lower for (e.g. ``('cpu', 'cuda')``); None means
        ``('cpu',)`` plus JAX's default backend when it is an accelerator. (Not a
        tf.estimator argument.)
      verify: load the written model with the installed TF and run every meta graph
        once at batch 1 before renaming it (not a tf.estimator argument).
      jax_artifact: also write ``jax/``, a TF-free artifact of the serving signatures
        (``jax.export`` functions and their weights; ``jaxspec.export.load_serving``
        reads it). Not a tf.estimator argument.
      warmup_requests: None; an int N (1 to 1000): N requests per serving signature from
        the receiver's example features (batch 1: a parse default_value, else zeros);
        or a list of feature dicts (feature key -> one row's value, no batch axis): written to
        ``assets.extra/tf_serving_warmup_requests`` for TF Serving to replay
        (``tf_bridge.export.warmup``). Not a tf.estimator argument.
      validate: with a PREDICT mode, run the written SavedModel's serving signatures (TF)
        and the JAX model (and ``jax/``'s functions when written) on the warmup rows (else
        the receiver's example) and write ``assets.extra/jaxspec_validation.json``
        (``tf_bridge.export.validation``), after the load check; not with ``verify=False``
        (TF may not run the model here; nor are the warmup records replayed then). True raises ``ExportValidationError`` on a
        difference beyond tolerance; ``'warn'`` logs it and keeps the export; False skips.
      validation_tolerances: dtype name (``'float32'``, ``'float16'``, ``'bfloat16'``,
        ``'float64'``) -> relative tolerance, over the defaults (float32 1e-5).

    Returns:
      The export directory ``<export_dir_base>/<unix seconds>`` as bytes (TF returns
      bytes too); if that name is taken the next free second is used. It holds
      ``assets.extra/jaxspec_export.json``: versions (installed, pinned, XlaCallModule
      serialization version written and supported), platforms, shapes and signatures.

    Raises:
      ValueError: no valid mode (TF's error), bad heads / receiver / assets_extra,
        outputs that do not fit the heads, or clashing variable names; warmup_requests
        above 1000 or rows that do not fit the features; a bad ``validate`` (all checked
        before anything is written, except the rows' fit).
      ExportValidationError: TF's outputs differ from JAX's beyond tolerance
        (``validate=True``); no export directory is left.
      ImportError: warmup_requests without ``tensorflow-serving-api`` (the ``tf`` extra).
      TypeError: a state leaf that is not numeric, or a sparse, ragged or string tensor
        reaching the JAX function.
      ExportCompatibilityError: the installed TensorFlow cannot run what this JAX
        writes (checked before converting, while jax2tf converts, and by the load
        check); the message names both versions and the XlaCallModule serialization
        versions.

    Signatures TF would leave out (classify/regress without a single string receiver
    tensor, outputs not computable from the inputs) are left out with a warning. On any
    error the temporary directory (and ``export_dir_base`` itself, when this call made
    it) is removed: nothing half-written stays behind. An ``export_dir_base`` in an object
    store (``gs://...``) is written locally and copied there through
    ``jaxspec.store.paths``, ``saved_model.pb`` last (``paths.export_through_local``).
    """
    if paths.is_url(os.fsdecode(export_dir_base)):  # TF's gfile may not reach the store
        return paths.export_through_local(
            os.fsdecode(export_dir_base),
            lambda local: export_all_saved_models(
                local,
                modes,
                state,
                assets_extra=assets_extra,
                as_text=as_text,
                global_step=global_step,
                platforms=platforms,
                verify=verify,
                jax_artifact=jax_artifact,
                warmup_requests=warmup_requests,
                validate=validate,
                validation_tolerances=validation_tolerances,
            ),
        )
    _warmup.check_warmup_requests(warmup_requests)
    _validation.check_validate(validate, validation_tolerances)
    chosen = modes_in_order(modes)
    if not chosen:
        raise ValueError(f"no valid mode to export; got {sorted(map(str, modes))}.")
    _compat.check_before_export()
    state, fns = _graph.without_prng_keys(state, {m: modes[m].fn for m in chosen})
    modes = {m: dataclasses.replace(modes[m], fn=fns[m]) for m in chosen}
    leaves, treedef = _graph.state_leaves(state)
    platforms = tuple(platforms) if platforms is not None else _graph.default_platforms()
    graphs: list[_modes.ModeGraph] = []

    # The TF1 graph APIs a SavedModel of a tf.estimator needs are deprecated in TF 2:
    # TF's notices about them are about tf_bridge, not the user's code, and stay quiet.
    def write(temp_dir: str) -> dict[str, Any]:
        with _deprecation.silence():
            with _compat.incompatibilities_reported():
                graphs.extend(
                    _modes.build(m, modes[m], leaves, treedef, global_step, platforms) for m in chosen
                )
            _write(temp_dir, graphs, [v for _, v in leaves], global_step, as_text)
            if jax_artifact:
                _write_jax_artifact(temp_dir, graphs, modes, state, leaves, global_step, platforms)
        return _record(graphs, leaves, global_step)

    def check(temp_dir: str) -> None:
        with _deprecation.silence():
            if verify:
                _compat.verify_export(temp_dir, [(g.tags, g.feeds, g.fetches) for g in graphs])
            if _modes.PREDICT in modes and (warmup_requests is not None or (validate and verify)):
                # Without verify TF may not run the model here: no validation, no replay.
                _serving_checks(
                    temp_dir,
                    graphs,
                    modes[_modes.PREDICT],
                    state,
                    global_step,
                    jax_artifact,
                    warmup_requests,
                    validate,
                    validation_tolerances,
                    verify,
                )

    final = write_export_dir(export_dir_base, write, assets_extra, check)
    logger.info("SavedModel with %s written to %s.", ", ".join(",".join(g.tags) for g in graphs), final)
    return tf.compat.as_bytes(final)


def export_saved_model(
    export_dir_base: str | bytes | os.PathLike[str],
    serving_input_receiver_fn: Callable[[], object],
    serving_fn: Callable[[PyTree, PyTree], Mapping[str, Mapping[str, ArrayLike]]],
    state: PyTree,
    heads: Mapping[str, ExportOutput],
    *,
    assets_extra: AssetsExtra | None = None,
    as_text: bool = False,
    global_step: int | None = None,
    platforms: Sequence[str] | None = None,
    verify: bool = True,
    jax_artifact: bool = False,
    warmup_requests: WarmupRequests = None,
    validate: bool | str = True,
    validation_tolerances: Mapping[str, float] | None = None,
) -> bytes:
    """Export ``serving_fn`` and ``state`` as a SavedModel for TF Serving
    (``tf.estimator.Estimator.export_saved_model``, PREDICT mode, tag ``serve``).

    Args:
      export_dir_base: the directory under which ``<timestamp>/`` is made.
      serving_input_receiver_fn: no-argument function returning a ``ServingInputReceiver``
        or ``TensorServingInputReceiver`` (see ``tf_bridge.export.receivers``); called inside the
        export's ``tf.compat.v1`` graph.
      serving_fn: pure JAX ``serving_fn(state, features) -> {head: {output key: array}}``;
        ``features`` has the receiver's structure (dict of arrays, or one array), each
        ``[batch, ...]`` with the batch size symbolic. A classification head returns
        ``scores`` (float ``[batch, K]``) and/or integer ``classes``; a regression head
        ``{'outputs': float [batch] or [batch, 1]}``; a predict head any dict of arrays.
      state: pytree of arrays (see ``export_all_saved_models``).
      heads: dict of signature key → ClassificationOutput / RegressionOutput /
        PredictOutput; gives each head's kind and a classification head's static class
        vocabulary (tiled to ``[batch, K]`` strings; integer ids go through
        ``tf.strings.as_string`` instead).
      assets_extra, as_text, global_step, platforms, verify, jax_artifact,
        warmup_requests, validate, validation_tolerances: as ``export_all_saved_models``.

    Returns:
      The export directory as bytes (see ``export_all_saved_models``).

    Raises:
      ValueError, TypeError, ExportCompatibilityError: as ``export_all_saved_models``.
    """

    def fn(state: PyTree, step: ArrayLike, features: PyTree, labels: PyTree) -> dict[str, PyTree]:
        return {"heads": serving_fn(state, features)}

    export = ModeExport(serving_input_receiver_fn, fn, _signatures.check_heads(heads))
    return export_all_saved_models(
        export_dir_base,
        {_modes.PREDICT: export},
        state,
        assets_extra=assets_extra,
        as_text=as_text,
        global_step=global_step,
        platforms=platforms,
        verify=verify,
        jax_artifact=jax_artifact,
        warmup_requests=warmup_requests,
        validate=validate,
        validation_tolerances=validation_tolerances,
    )
