"""``Estimator.export_saved_model`` / ``experimental_export_all_saved_models``: the TF half.
jaxspec restores the state and builds model_fn's per-mode functions; this writes them as
one SavedModel."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

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
    prepare: Callable[[list[str], dict[str, tuple[Any, Any]]], Any],
    export_dir_base: str,
    input_receiver_fn_map: Mapping[str, Any],
    assets_extra: dict[str, str] | None,
    as_text: bool,
) -> bytes | None:
    """Write one SavedModel with a meta graph per mode in ``input_receiver_fn_map``
    (tf.estimator's ``_export_all_saved_models``).

    Args:
      prepare: ``prepare(modes, examples)`` restores the state and returns a
        ``jaxspec.ExportSource`` (state, global step, per-mode functions, PREDICT's
        heads), or None on a process other than 0; ``examples`` maps each mode to numpy
        zeros shaped like its receiver's ``(features, labels)``. jaxspec's Estimators
        pass their own (``Estimator.experimental_export_all_saved_models``).
      export_dir_base, input_receiver_fn_map, assets_extra, as_text: as tf.estimator.

    Returns:
      The timestamped export directory as bytes; None on processes other than 0.

    Raises:
      ValueError: no mode has a receiver fn, or ``prepare``'s errors (no checkpoint).
    """
    modes = [m for m in MODE_ORDER if input_receiver_fn_map.get(m)]
    if not modes:
        raise ValueError(f"no valid modes to export; got {sorted(map(str, input_receiver_fn_map))}.")
    examples = {m: _example_inputs(input_receiver_fn_map[m]) for m in modes}
    source = prepare(modes, examples)
    if source is None:
        return None
    exports = {
        mode: ModeExport(
            input_receiver_fn_map[mode], source.fns[mode], source.heads if mode == ModeKeys.PREDICT else None
        )
        for mode in modes
    }
    path = export_all_saved_models(
        export_dir_base,
        exports,
        source.state,
        assets_extra=assets_extra,
        as_text=as_text,
        global_step=source.global_step,
    )
    _log.info("SavedModel (%s) written to %s.", ", ".join(modes), path.decode())
    return path
