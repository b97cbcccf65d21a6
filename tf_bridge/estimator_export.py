"""``Estimator.export_saved_model``: restore the checkpoint, trace PREDICT, write the model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import tensorflow as tf

from jaxspec.engine.steps import StepEngine
from jaxspec.loop.session import Session
from jaxspec.mode_keys import ModeKeys
from tf_bridge.saved_model import export_saved_model

_log = logging.getLogger("tf_bridge")


def _example_features(serving_input_receiver_fn: Callable[[], Any]) -> Any:
    """Zeros shaped like the receiver's features (unknown dims as 1), built in a scratch
    graph: what init_fn and the PREDICT trace need before the real export graph exists."""

    def zeros(t: Any) -> np.ndarray:
        shape = [1 if d is None else d for d in t.shape.as_list()]
        return np.zeros(shape, t.dtype.as_numpy_dtype)

    with tf.Graph().as_default():
        receiver = serving_input_receiver_fn()
        return tf.nest.map_structure(zeros, receiver.features)


def export_estimator(est: Any, export_dir_base: str, serving_input_receiver_fn: Callable[[], Any],
                     assets_extra: dict[str, str] | None, as_text: bool, checkpoint_path: str | None) -> bytes:
    """Export ``est``'s latest (or ``checkpoint_path``'s) state in PREDICT mode.

    TPUEstimator exports its one-device (CPU) graph: model_fn runs off the mesh with
    ``as_estimator_spec()`` semantics; TF's TPU metagraph is not produced.

    Raises:
      ValueError: model_dir has no checkpoint (TF: "could not find trained model").
    """
    store = est._checkpoint_store()
    features = _example_features(serving_input_receiver_fn)
    engine = StepEngine(est.model_fn, {ModeKeys.PREDICT: est._export_params()}, est.config, mesh=None)
    session = Session(engine, ModeKeys.PREDICT, est._init_fn, store, (features, None),
                      est.config.tf_random_seed, checkpoint_path)
    if session.restored_step is None:
        raise ValueError(f"export_saved_model: no trained model (checkpoint) in {est.model_dir}.")
    session.create_state()
    serving_fn = engine.serving_fn(session.step_key)
    jax.eval_shape(serving_fn, session.state, features)  # traces model_fn: the heads
    heads = engine.parts[ModeKeys.PREDICT].export_outputs
    path = export_saved_model(export_dir_base, serving_input_receiver_fn, serving_fn, session.state, heads,
                              assets_extra=assets_extra, as_text=as_text, global_step=session.restored_step)
    _log.info("SavedModel written to %s.", path.decode())
    return path
