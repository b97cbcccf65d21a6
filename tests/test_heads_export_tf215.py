"""jaxspec heads exported through tf_bridge: the SavedModel's signature defs hold what TF
2.15's heads put there for the same logits (tests/data/tf215_heads.json), the predict
signature's ``classes``/``all_classes`` as string class names (the label_vocabulary's, or
``'0'``, ``'1'``, ...), though jaxspec's own predictions hold int32 class ids."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import jaxspec
import tf_bridge
from tests.helpers import fast_config
from tests.test_heads_reference import CASES, build_head

# TF's class ids are int64 where JAX computes int32 (jaxspec.Estimator.export_saved_model
# says so); every other dtype and every shape is TF's.
_INT_WIDTH = {"DT_INT64": "DT_INT32"}
NAMES = [
    "binary_default",
    "binary_weights_thresholds_vocab_sum",
    "multiclass_vocab_weights_sum",
    "multilabel_thresholds_classes_vocab_weights",
    "multihead_multiclass_binary_weighted",
    "regression_default",
]


def _model_fn(head: Any) -> Any:
    def model_fn(features, labels, mode, state):
        logits = features["logits"] @ state["eye"]  # the features are the logits
        if mode == jaxspec.ModeKeys.TRAIN:  # one step that changes nothing: a checkpoint
            return jaxspec.EstimatorSpec(mode, loss=0.0 * jnp.sum(logits), train_op=state)
        return head.create_estimator_spec(features=features, mode=mode, logits=logits, labels=labels)

    return model_fn


def _outputs(signature: Any) -> dict[str, list[Any]]:
    def dims(info: Any) -> list[int]:
        return [d.size for d in info.tensor_shape.dim]

    return {k: [tf.dtypes.as_dtype(v.dtype).as_datatype_enum, dims(v)] for k, v in signature.outputs.items()}


def _signature_outputs(export_dir: str) -> dict[str, dict[str, list[Any]]]:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(f"{export_dir}/saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    (meta,) = saved.meta_graphs
    return {
        key: {"method_name": sig.method_name, "outputs": _outputs(sig)}
        for key, sig in meta.signature_def.items()
    }


def _tf_outputs(want: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The reference's signatures, outputs only (the receivers' input names differ), with
    TF's int64 class ids as int32."""
    enum = {
        name: tf.dtypes.as_dtype(name.lower()[3:]).as_datatype_enum
        for name in ("DT_FLOAT", "DT_STRING", "DT_INT32", "DT_INT64")
    }
    out = {}
    for key, sig in want.items():
        outputs = {k: [enum[_INT_WIDTH.get(d, d)], shape] for k, (d, shape) in sig["outputs"].items()}
        out[key] = {"method_name": sig["method_name"], "outputs": outputs}
    return out


@pytest.mark.parametrize("name", NAMES)
def test_exported_signatures_and_served_classes_match_tf215(tmp_path: Any, name: str) -> None:
    case = CASES[name]
    head = build_head(case["head"])
    logits = np.asarray(case["inputs"]["logits"], np.float32)
    width = logits.shape[-1]
    est = jaxspec.Estimator(
        _model_fn(head),
        str(tmp_path / "model"),
        config=fast_config(str(tmp_path / "model")),
        init_fn=lambda rng: {"eye": jnp.eye(width, dtype=jnp.float32)},
    )
    est.train(lambda: iter([({"logits": logits}, None)]), steps=1)

    raw = tf_bridge.build_raw_serving_input_receiver_fn({"logits": tf.zeros([1, width])})
    raw_dir = est.export_saved_model(str(tmp_path / "raw"), raw).decode()
    assert _signature_outputs(raw_dir) == _tf_outputs(case["signature_defs"]["raw"])
    parsing = tf_bridge.build_parsing_serving_input_receiver_fn(
        {"logits": tf.io.FixedLenFeature([width], tf.float32)}
    )
    example_dir = est.export_saved_model(str(tmp_path / "example"), parsing).decode()
    assert _signature_outputs(example_dir) == _tf_outputs(case["signature_defs"]["example"])

    served = tf.saved_model.load(raw_dir).signatures["predict"](logits=tf.constant(logits))
    for key, want in case["predictions"].items():
        got = served[key].numpy()
        if got.dtype == object:
            np.testing.assert_array_equal(got.astype(str), np.asarray(want), err_msg=key)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=key)
