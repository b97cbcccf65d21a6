"""``Estimator.export_saved_model`` for TensorFlow model_fns, as tf.estimator (2.15).

A fresh graph per mode: the receiver's tensors, model_fn in that mode, the signature
defs TensorFlow's own ``model_utils`` builds from the spec's export outputs (the code
tf.estimator used), the checkpoint restored, and ``tf.compat.v1.saved_model.Builder``.
The export directory (mode order, the timestamped directory written atomically,
``assets_extra`` and its checks) is ``tf_bridge.export.saved_model.write_export_dir``, the
same as for jaxspec models.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import tensorflow as tf
from tensorflow.python.saved_model import model_utils

from jaxspec.mode_keys import ModeKeys
from tf_bridge.export import warmup as _warmup
from tf_bridge.export.saved_model import modes_in_order, write_export_dir
from tf_bridge.runtime.runner.plan import TFRunPlan

if TYPE_CHECKING:
    from tensorflow.python.saved_model.model_utils import export_output as tfs

    from tf_bridge.export.receivers import InputReceiver
    from tf_bridge.export.signatures import SignatureDef
    from tf_bridge.export.warmup import WarmupRequests

_log = logging.getLogger("tf_bridge")


def _restore(
    session: tf.compat.v1.Session, saver: tf.compat.v1.train.Saver, checkpoint_path: str, mode: str
) -> None:
    """Restore ``checkpoint_path`` into the export graph.

    Raises:
      ValueError: the checkpoint lacks a variable the graph has.
    """
    try:
        saver.restore(session, checkpoint_path)
    except tf.errors.NotFoundError as err:
        raise ValueError(
            f"export ({mode}): the checkpoint {checkpoint_path} lacks variables the model_fn creates; "
            f"model_fn must build the variables it was trained with. TensorFlow said: {err.message}"
        ) from err


def warn_left_out(
    receiver: InputReceiver, outputs: dict[str, tfs.ExportOutput], signatures: dict[str, SignatureDef]
) -> None:
    """Name each export output left out of ``signatures`` and why, at WARNING on the
    ``tf_bridge`` logger. TensorFlow's ``build_all_signature_defs`` gives the reason at
    INFO only (hidden by default) and then just "Export includes no signatures!" at WARNING
    (still said, by TensorFlow's logger)."""
    groups = [(None, receiver.receiver_tensors)]
    groups += list((getattr(receiver, "receiver_tensors_alternatives", None) or {}).items())
    for group, tensors in groups:
        for key, output in outputs.items():
            name = key if group is None else f"{group}:{key}"
            if name in signatures:
                continue
            try:
                output.as_signature_def(tensors)
                why = "TensorFlow Serving cannot serve its method name"
            except ValueError as err:
                why = str(err)
            _log.warning("Signature %r left out of the SavedModel: %s", name, why)


def add_meta_graph_for_mode(
    plan: TFRunPlan,
    builder: tf.compat.v1.saved_model.Builder,
    receiver_fn: Callable[[], object],
    checkpoint_path: str,
    save_variables: bool,
    strip_default_attrs: bool = True,
) -> None:
    """Build ``plan.mode``'s graph from the receiver and add it (and, the first time, the
    variables) to ``builder``, with tf.estimator's tags and signatures."""
    mode = plan.mode
    with tf.Graph().as_default() as graph:
        plan.create_global_step(graph)
        tf.compat.v1.random.set_random_seed(plan.config.tf_random_seed)
        receiver = receiver_fn()
        spec = plan.model_fn(receiver.features, getattr(receiver, "labels", None))
        outputs = model_utils.export_outputs_for_mode(
            mode=spec.mode,
            serving_export_outputs=spec.export_outputs,
            predictions=spec.predictions,
            loss=spec.loss,
            metrics=spec.eval_metric_ops,
        )
        signatures = model_utils.build_all_signature_defs(
            receiver.receiver_tensors,
            outputs,
            getattr(receiver, "receiver_tensors_alternatives", None),
            serving_only=(mode == ModeKeys.PREDICT),
        )
        if mode == ModeKeys.PREDICT:
            warn_left_out(receiver, outputs, signatures)
        with tf.compat.v1.Session(config=plan.session_config) as session:
            local_init_op = spec.scaffold.local_init_op
            if local_init_op is None:
                local_init_op = tf.compat.v1.train.Scaffold.default_local_init_op()
            saver = spec.scaffold.saver or tf.compat.v1.train.Saver(sharded=True)
            _restore(session, saver, checkpoint_path, mode)
            builder._add_train_op(spec.train_op)
            kwargs = dict(
                tags=model_utils.EXPORT_TAG_MAP[mode],
                signature_def_map=signatures,
                assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                main_op=local_init_op,
                saver=saver,
                strip_default_attrs=strip_default_attrs,
            )
            if save_variables:
                builder.add_meta_graph_and_variables(session, **kwargs)
            else:
                builder.add_meta_graph(**kwargs)


def export_all(
    plans: dict[str, TFRunPlan],
    export_dir_base: str,
    receiver_fn_map: dict[str, Callable[[], object]],
    assets_extra: dict[str, str] | None,
    as_text: bool,
    checkpoint_path: str,
    strip_default_attrs: bool = True,
    warmup_requests: WarmupRequests = None,
) -> bytes:
    """Export every mode of ``receiver_fn_map`` (each with its plan, built for export) into
    one SavedModel restored from ``checkpoint_path``; return its path. Default-valued
    node attributes are left out unless ``strip_default_attrs`` is False.

    The variables are saved with the first mode in TRAIN, EVAL, PREDICT order, as TF.

    Raises:
      ValueError: a receiver_fn is None, no mode of the map is TRAIN/EVAL/PREDICT, or a
        bad ``assets_extra`` (see ``write_export_dir``); warmup rows that do not fit.

    ``warmup_requests`` (None, an int or feature dicts; see ``tf_bridge.export.warmup``)
    writes TF Serving's warmup records for PREDICT's signatures inside the atomic export.
    """
    for mode, fn in receiver_fn_map.items():
        if fn is None:
            raise ValueError(f"export: the input receiver function for mode {mode!r} is None.")
    modes = modes_in_order(receiver_fn_map)
    if not modes:
        raise ValueError(f"export: no exportable mode in {sorted(receiver_fn_map)}; use ModeKeys values.")

    def write(temp_dir: str) -> None:
        builder = tf.compat.v1.saved_model.Builder(temp_dir)
        for i, mode in enumerate(modes):
            add_meta_graph_for_mode(
                plans[mode], builder, receiver_fn_map[mode], checkpoint_path, i == 0, strip_default_attrs
            )
        builder.save(as_text)
        if warmup_requests is not None and ModeKeys.PREDICT in modes:
            example = _warmup.receiver_example(receiver_fn_map[ModeKeys.PREDICT])
            rows = _warmup.feature_rows(warmup_requests, example, _warmup.parsed_defaults(temp_dir))
            _warmup.write_warmup(temp_dir, rows)

    export_dir = write_export_dir(export_dir_base, write, assets_extra)
    _log.info("SavedModel written to %s.", export_dir)
    return tf.compat.as_bytes(export_dir)
