"""``Estimator.export_saved_model`` / ``experimental_export_all_saved_models``: restore
the checkpoint, trace model_fn per mode off the mesh, write one SavedModel."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from jaxspec.engine.steps import StepEngine
from jaxspec.loop.session import Session
from jaxspec.mode_keys import ModeKeys
from tf_bridge._modes import ModeExport
from tf_bridge.saved_model import MODE_ORDER, export_all_saved_models

_log = logging.getLogger("tf_bridge")


def _example_inputs(receiver_fn: Callable[[], Any]) -> tuple[Any, Any]:
    """Zeros shaped like the receiver's features and labels (unknown dims as 1), built in
    a scratch graph: what init_fn and the PREDICT trace need before the export graphs."""

    def zeros(t: Any) -> np.ndarray:
        shape = [1 if d is None else d for d in t.shape.as_list()]
        return np.zeros(shape, t.dtype.as_numpy_dtype)

    with tf.Graph().as_default():
        receiver = receiver_fn()
        labels = getattr(receiver, "labels", None)
        return (
            tf.nest.map_structure(zeros, receiver.features),
            None if labels is None else tf.nest.map_structure(zeros, labels),
        )


def export_estimator_modes(
    est: Any,
    export_dir_base: str,
    input_receiver_fn_map: Mapping[str, Any],
    assets_extra: dict[str, str] | None,
    as_text: bool,
    checkpoint_path: str | None,
) -> bytes | None:
    """Export ``est``'s latest (or ``checkpoint_path``'s) state with one meta graph per
    mode in ``input_receiver_fn_map`` (tf.estimator's ``_export_all_saved_models``).

    model_fn runs off the mesh with ``params`` of the export (TPUEstimator:
    ``use_tpu=False``, its CPU graph; TF's TPU metagraph is not produced), in each mode,
    with the receiver's features (and labels in TRAIN/EVAL), ``global_step`` the step
    variable and ``rng`` folded from it as in training.

    With several processes every one must call this (the checkpoint is read
    collectively); process 0 writes the SavedModel and the others return None.

    Raises:
      ValueError: no mode has a receiver fn, or model_dir has no checkpoint (TF: "could
        not find trained model").
    """
    modes = [m for m in MODE_ORDER if input_receiver_fn_map.get(m)]
    if not modes:
        raise ValueError(f"no valid modes to export; got {sorted(map(str, input_receiver_fn_map))}.")
    examples = {m: _example_inputs(input_receiver_fn_map[m]) for m in modes}
    params = est._export_params()
    engine = StepEngine(est._model_fn, {m: params for m in ModeKeys.all()}, est.config, mesh=None)
    session = Session(
        engine,
        modes[0],
        est._init_fn,
        est._checkpoint_store(),
        examples[modes[0]],
        est.config.tf_random_seed,
        checkpoint_path,
    )
    if session.restored_step is None:
        raise ValueError(f"export: no trained model (checkpoint) in {est.model_dir}.")
    session.create_state()  # every process restores (Orbax reads collectively)
    if jax.process_index() != 0:
        _log.info("Export is written by process 0; process %d returns None.", jax.process_index())
        return None
    exports = {}
    for mode in modes:
        fn = engine.export_fn(mode, session.step_key)
        heads = None
        if mode == ModeKeys.PREDICT:
            features, _ = examples[mode]
            jax.eval_shape(fn, session.state, jnp.zeros((), jnp.int32), features, None)  # the heads
            heads = engine.parts[ModeKeys.PREDICT].export_outputs
        exports[mode] = ModeExport(input_receiver_fn_map[mode], fn, heads)
    path = export_all_saved_models(
        export_dir_base,
        exports,
        session.state,
        assets_extra=assets_extra,
        as_text=as_text,
        global_step=session.restored_step,
    )
    _log.info("SavedModel (%s) written to %s.", ", ".join(modes), path.decode())
    return path
