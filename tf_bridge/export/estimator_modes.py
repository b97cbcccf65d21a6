"""``Estimator.export_saved_model`` / ``experimental_export_all_saved_models``: the TF half.
jaxspec restores the state and builds model_fn's per-mode functions; this writes them as
one SavedModel."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np
import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import ArrayLike, PyTree
from tf_bridge.export.modes import ModeExport
from tf_bridge.export.receivers import InputReceiver
from tf_bridge.export.saved_model import export_all_saved_models, modes_in_order

if TYPE_CHECKING:
    from jaxspec.loop.export_source import ExportSource

_log = logging.getLogger("tf_bridge")
# A receiver fn of ``input_receiver_fn_map``: ``() -> receiver`` (None: the mode is skipped).
ReceiverFn: TypeAlias = Callable[[], object]


def _example_inputs(receiver_fn: ReceiverFn) -> tuple[PyTree, PyTree]:
    """Zeros shaped like the receiver's features and labels (unknown dims as 1), built in
    a scratch graph: what init_fn and the PREDICT trace need before the export graphs."""

    def zeros(t: tf.Tensor) -> np.ndarray:
        shape = [1 if d is None else d for d in t.shape.as_list()]
        return np.zeros(shape, t.dtype.as_numpy_dtype)

    with tf.Graph().as_default():
        receiver = cast(InputReceiver, receiver_fn())  # a receiver fn's result (checked when exported)
        labels = getattr(receiver, "labels", None)
        return (
            tf.nest.map_structure(zeros, receiver.features),
            None if labels is None else tf.nest.map_structure(zeros, labels),
        )


def export_modes(
    input_receiver_fn_map: Mapping[str, ReceiverFn | None],
) -> tuple[list[str], dict[str, tuple[PyTree, PyTree]]]:
    """The modes to export, in the order their meta graphs are written (TRAIN, EVAL,
    PREDICT), and for each numpy zeros shaped like its receiver's ``(features, labels)``:
    what ``jaxspec``'s export source needs before the SavedModel is written.

    Raises:
      ValueError: no mode of ``input_receiver_fn_map`` has a receiver fn (as tf.estimator).
    """
    modes = modes_in_order(input_receiver_fn_map)
    if not modes:
        raise ValueError(f"no valid modes to export; got {sorted(map(str, input_receiver_fn_map))}.")
    given = {m: cast(ReceiverFn, input_receiver_fn_map[m]) for m in modes}  # each has a fn
    return modes, {m: _example_inputs(fn) for m, fn in given.items()}


def write_estimator_modes(
    source: ExportSource,
    modes: list[str],
    export_dir_base: str,
    input_receiver_fn_map: Mapping[str, ReceiverFn | None],
    assets_extra: dict[str, str] | None,
    as_text: bool,
    jax_artifact: bool = False,
    *,
    warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
    validate: bool | str = True,
    validation_tolerances: Mapping[str, float] | None = None,
) -> bytes | None:
    """Write one SavedModel with a meta graph per mode of ``modes`` (tf.estimator's
    ``_export_all_saved_models``).

    Args:
      source: a ``jaxspec`` ExportSource (state, global step, per-mode functions,
        PREDICT's heads), from ``jaxspec.loop.export_source.export_source``.
      modes: from ``export_modes(input_receiver_fn_map)``.
      export_dir_base, input_receiver_fn_map, assets_extra, as_text: as tf.estimator.
      jax_artifact: also write the TF-free ``jax/`` artifact (see ``export_all_saved_models``).
      warmup_requests, validate, validation_tolerances: see ``export_all_saved_models``.

    Returns:
      The timestamped export directory as bytes.
    """
    exports = {
        mode: ModeExport(
            cast(ReceiverFn, input_receiver_fn_map[mode]),
            source.fns[mode],
            source.heads if mode == ModeKeys.PREDICT else None,
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
        jax_artifact=jax_artifact,
        warmup_requests=warmup_requests,
        validate=validate,
        validation_tolerances=validation_tolerances,
    )
    _log.info("SavedModel (%s) written to %s.", ", ".join(modes), path.decode())
    return path
