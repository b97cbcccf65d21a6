"""A linear regressor exported in all three modes: signature defs equal TF 2.15
tf.estimator's (tests/data/tf_estimator_reference.json), and TF runs each meta graph to
jaxspec's own predict / train / evaluate numbers."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from tests.helpers import fast_config  # noqa: E402
from tests.test_export_support import (  # noqa: E402
    REFERENCE,
    batches_fn,
    describe,
    differences,
    linear_data,
    linear_init_fn,
    linear_model_fn,
    serialize,
)

TRAIN, EVAL, PREDICT = jaxspec.ModeKeys.TRAIN, jaxspec.ModeKeys.EVAL, jaxspec.ModeKeys.PREDICT
X, Y = linear_data(21)  # 21 rows: eval batches of 8, 8 and 5


def make_estimator(model_dir):
    return jaxspec.Estimator(
        linear_model_fn, str(model_dir), config=fast_config(str(model_dir)), init_fn=linear_init_fn
    )


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    root = tmp_path_factory.mktemp("linear")
    est = make_estimator(root / "model")
    est.train(batches_fn(X, Y, 8, repeat=True), steps=3)
    supervised = tf_bridge.build_supervised_input_receiver_fn_from_input_fn(batches_fn(X, Y, 8))
    serving = tf_bridge.build_parsing_serving_input_receiver_fn({"x": tf.io.FixedLenFeature([3], tf.float32)})
    path = est.experimental_export_all_saved_models(
        str(root / "export"), {TRAIN: supervised, EVAL: supervised, PREDICT: serving}
    ).decode()
    return {"est": est, "path": path, "root": root}


def test_signature_defs_equal_tf_estimators(linear):
    assert differences(describe(linear["path"]), REFERENCE["linear"]["all"]) == []
    # The PREDICT-only reference is the same serve meta graph.
    assert REFERENCE["linear"]["predict"]["serve"] == REFERENCE["linear"]["all"]["serve"]


def test_raw_receiver_skips_regress_as_tf_does(linear, caplog):
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    with caplog.at_level(logging.WARNING, logger="tf_bridge"):
        path = linear["est"].export_saved_model(str(linear["root"] / "raw"), receiver).decode()
    assert differences(describe(path), REFERENCE["linear_raw"]["predict"]) == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'serving_default'" in m for m in warned)  # the regress head: float input
    assert any("no 'serving_default'" in m for m in warned)


@pytest.fixture(scope="module")
def served(linear):
    return tf.saved_model.load(linear["path"], tags=["serve"])


@pytest.mark.parametrize("batch", [1, 7, 300])
def test_serving_equals_predict(linear, served, batch):
    xs, _ = linear_data(batch, seed=batch)
    want = np.stack([p["predictions"] for p in linear["est"].predict(lambda: iter([{"x": xs}]))])
    examples = serialize(xs)
    got = served.signatures["predict"](examples=examples)["predictions"].numpy()
    assert got.shape == (batch, 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    regress = served.signatures["serving_default"](inputs=examples)["outputs"].numpy()
    np.testing.assert_allclose(regress, want, rtol=0, atol=1e-5)


def _load(path, tags):
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, tags, path)
    return graph, session, meta


def test_v1_train_graph_takes_jaxspecs_training_step(linear, tmp_path):
    est = linear["est"]
    graph, session, meta = _load(linear["path"], ["train"])
    sig = meta.signature_def["train"]
    feed = {sig.inputs["x"].name: X[:8], sig.inputs["label"].name: Y[:8]}
    (train_op,) = graph.get_collection("saved_model_train_op")
    loss, _ = session.run([sig.outputs["loss"].name, train_op], feed)
    variables = {v.op.name: v for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)}
    assert set(variables) == {"params/w", "params/b", "global_step"}
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    assert {v.op.name for v in trainable} == {"params/w", "params/b"}
    values = session.run(variables)
    session.close()

    # jaxspec: one step from the same checkpoint on the same batch.
    shutil.copytree(est.model_dir, tmp_path / "model", ignore=shutil.ignore_patterns("export", "raw"))
    again = make_estimator(tmp_path / "model")
    again.train(batches_fn(X[:8], Y[:8], 8, repeat=True), steps=1)
    w0, b0 = est.get_variable_value("params/w"), est.get_variable_value("params/b")
    np.testing.assert_allclose(loss, np.mean((X[:8] @ w0 + b0 - Y[:8]) ** 2), rtol=1e-5)
    np.testing.assert_allclose(values["params/w"], again.get_variable_value("params/w"), rtol=0, atol=1e-6)
    np.testing.assert_allclose(values["params/b"], again.get_variable_value("params/b"), rtol=0, atol=1e-6)
    assert values["global_step"] == 4  # restored at 3, one step taken


def test_v1_eval_graph_streams_jaxspecs_metrics(linear):
    want = linear["est"].evaluate(batches_fn(X, Y, 8))
    graph, session, meta = _load(linear["path"], ["eval"])
    sig = meta.signature_def["eval"]
    out = {k: v.name for k, v in sig.outputs.items()}
    for s in range(0, len(X), 8):
        feed = {sig.inputs["x"].name: X[s : s + 8], sig.inputs["label"].name: Y[s : s + 8]}
        got = session.run(
            {k: out[k] for k in ("loss", "predictions", "metrics/mae/update_op", "metrics/rmse/update_op")},
            feed,
        )
    values = session.run({k: out[f"metrics/{k}/value"] for k in ("mae", "rmse")})
    session.close()
    # update_op returned the value after the last batch; value reads the same state.
    for name in ("mae", "rmse"):
        np.testing.assert_allclose(values[name], want[name], rtol=1e-5)
        np.testing.assert_allclose(got[f"metrics/{name}/update_op"], want[name], rtol=1e-5)
    w, b = (linear["est"].get_variable_value(n) for n in ("params/w", "params/b"))
    np.testing.assert_allclose(got["predictions"], X[16:] @ w + b, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["loss"], np.mean((X[16:] @ w + b - Y[16:]) ** 2), rtol=1e-5)


def test_saved_model_cli_lists_every_signature(linear):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    if not os.path.exists(cli):
        pytest.skip("saved_model_cli is not installed next to this Python")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    shown = subprocess.run(
        [cli, "show", "--dir", linear["path"], "--all"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout
    for tags, key, method in [
        ("train", "train", "training"),
        ("eval", "eval", "eval"),
        ("serve", "serving_default", "regress"),
        ("serve", "predict", "predict"),
    ]:
        assert f"MetaGraphDef with tag-set: '{tags}'" in shown
        assert f"signature_def['{key}']" in shown
        assert (
            f"Method name is: tensorflow/{'supervised' if tags != 'serve' else 'serving'}/{method}" in shown
        )


def test_export_record(linear):
    with open(os.path.join(linear["path"], "assets.extra", "jaxspec_export.json")) as f:
        record = json.load(f)
    assert set(record["meta_graphs"]) == {"train", "eval", "serve"}
    assert record["meta_graphs"]["train"]["polymorphic_shapes"] == {"x": "(b, 3)", "labels": "(b, 1)"}
    assert record["meta_graphs"]["serve"]["signatures"] == {
        "predict": "tensorflow/serving/predict",
        "serving_default": "tensorflow/serving/regress",
    }
    assert record["variables"] == ["params/b", "params/w"]
    assert record["global_step"] == 3
    assert record["tensorflow"] == tf.__version__
    assert record["xla_call_module_versions"] == [record["jax_export_calling_convention_version"]]
    assert record["xla_call_module_versions"][0] <= record["tf_xla_call_module_max_version"]


def test_no_valid_mode_and_no_checkpoint_raise_valueerror(tmp_path, linear):
    with pytest.raises(ValueError, match="no valid mode"):
        linear["est"].experimental_export_all_saved_models(str(tmp_path), {"bogus": lambda: None})
    with pytest.raises(ValueError, match="receiver_fn"):
        linear["est"].export_saved_model(str(tmp_path), None)
    fresh = make_estimator(tmp_path / "fresh")
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.zeros([1, 3])})
    with pytest.raises(ValueError, match="checkpoint"):
        fresh.export_saved_model(str(tmp_path / "export"), receiver)
    assert not os.path.exists(tmp_path / "export") or os.listdir(tmp_path / "export") == []
