"""Shared by the export tests (no tests here): the TF 2.15 reference, a SavedModel's
signature defs as plain data, and the linear regressor of ``tools/tf_estimator_reference.py``."""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

import jaxspec  # noqa: E402
from jaxspec.export import PredictOutput, RegressionOutput  # noqa: E402
from jaxspec.metrics import core as metrics  # noqa: E402

REFERENCE_PATH = os.path.join(os.path.dirname(__file__), "data", "tf_estimator_reference.json")
with open(REFERENCE_PATH) as _f:
    REFERENCE: dict[str, Any] = json.load(_f)

# TF's build_supervised_input_receiver_fn_from_input_fn names placeholders after the
# tf.data iterator op; a jaxspec input_fn gives numpy batches, whose placeholders get
# TF's default name. Every other input tensor name is compared.
_ITERATOR_OP = "IteratorGetNext"


def _tensor_info(info: Any) -> dict[str, Any]:
    shape = None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
    return {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": shape, "name": info.name}


def describe(export_dir: str) -> dict[str, Any]:
    """Per meta graph (tags joined by ','): signatures (method, inputs, outputs with dtype,
    shape, tensor name) and the ``saved_model_*`` collections; what the tool records."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graphs = {}
    for meta in proto.meta_graphs:
        graphs[",".join(sorted(meta.meta_info_def.tags))] = {
            "signatures": {
                key: {
                    "method_name": sig.method_name,
                    "inputs": {k: _tensor_info(v) for k, v in sorted(sig.inputs.items())},
                    "outputs": {k: _tensor_info(v) for k, v in sorted(sig.outputs.items())},
                }
                for key, sig in sorted(meta.signature_def.items())
            },
            "collections": sorted(k for k in meta.collection_def if k.startswith("saved_model")),
        }
    return graphs


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every difference between two ``describe`` results as ``(tags, signature, io, key,
    field, ours, theirs)`` tuples (output tensor names are graph-internal: not compared)."""
    found: list[tuple[str, ...]] = []
    if set(ours) != set(theirs):
        return [("meta graphs", str(sorted(ours)), str(sorted(theirs)))]
    for tags in theirs:
        mine, ref = ours[tags], theirs[tags]
        if mine["collections"] != ref["collections"]:
            found.append((tags, "collections", str(mine["collections"]), str(ref["collections"])))
        if set(mine["signatures"]) != set(ref["signatures"]):
            found.append(
                (tags, "signatures", str(sorted(mine["signatures"])), str(sorted(ref["signatures"])))
            )
            continue
        for key, sig in ref["signatures"].items():
            got = mine["signatures"][key]
            if got["method_name"] != sig["method_name"]:
                found.append((tags, key, "method_name", got["method_name"], sig["method_name"]))
            for io in ("inputs", "outputs"):
                if set(got[io]) != set(sig[io]):
                    found.append((tags, key, io, str(sorted(got[io])), str(sorted(sig[io]))))
                    continue
                for name, info in sig[io].items():
                    fields = ["dtype", "shape"]
                    if io == "inputs" and not info["name"].startswith(_ITERATOR_OP):
                        fields.append("name")
                    for field in fields:
                        if got[io][name][field] != info[field]:
                            found.append(
                                (tags, key, io, name, field, str(got[io][name][field]), str(info[field]))
                            )
    return found


def serialize(xs: np.ndarray) -> Any:
    """Serialized tf.Examples with one float feature ``x`` per row."""
    return tf.constant(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=row))}
                )
            ).SerializeToString()
            for row in xs
        ]
    )


# -- the linear regressor (tools/tf_estimator_reference.py's `linear`) ---------------------
LINEAR_LR = 0.1


def linear_model_fn(features, labels, mode, state):
    def predict(p):
        return features["x"] @ p["w"] + p["b"]

    y = predict(state["params"])
    predictions = {"predictions": y}
    if mode == jaxspec.ModeKeys.PREDICT:
        return jaxspec.EstimatorSpec(
            mode,
            predictions=predictions,
            export_outputs={"serving_default": RegressionOutput(y), "predict": PredictOutput(predictions)},
        )
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((predict(p) - labels) ** 2))(state["params"])
    if mode == jaxspec.ModeKeys.TRAIN:
        new = jax.tree.map(lambda p, g: p - LINEAR_LR * g, state["params"], grads)
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"params": new})
    return jaxspec.EstimatorSpec(
        mode,
        loss=loss,
        predictions=predictions,
        eval_metric_ops={
            "mae": metrics.mean_absolute_error(labels, y),
            "rmse": metrics.root_mean_squared_error(labels, y),
        },
    )


def linear_init_fn(rng):
    return {"params": {"w": jax.random.normal(rng, (3, 1)), "b": jnp.full((1,), 0.25)}}


def linear_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.RandomState(seed)
    x = rs.rand(n, 3).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [3.0]], np.float32) + 0.5 + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def batches_fn(x: np.ndarray, y: np.ndarray, batch: int, repeat: bool = False) -> Any:
    """A jaxspec input_fn yielding ``({'x': ...}, y)`` batches in order."""

    def input_fn():
        def gen():
            while True:
                for s in range(0, len(x), batch):
                    yield {"x": x[s : s + batch]}, y[s : s + batch]
                if not repeat:
                    return

        return gen()

    return input_fn
