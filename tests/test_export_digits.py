"""The digits TPUEstimator (examples/digits.py's model_fn) exported in all three modes:
signature defs against TF 2.15's TPUEstimator(use_tpu=False), outputs against jaxspec's
predict and evaluate on the mesh."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from examples import digits  # noqa: E402
from tests.helpers import fast_config  # noqa: E402
from tests.test_export_support import REFERENCE, describe, differences, serialize  # noqa: E402

TRAIN, EVAL, PREDICT = jaxspec.ModeKeys.TRAIN, jaxspec.ModeKeys.EVAL, jaxspec.ModeKeys.PREDICT
# The one difference from tf.estimator: JAX (without x64) computes argmax as int32, TF's
# tf.argmax gives int64. jaxspec keeps the dtype the model computed (docs/decisions.md).
KNOWN = [("serve", "serving_default", "outputs", "class_ids", "dtype", "int32", "int64")]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    x_train, y_train, x_test, y_test = digits.load_data()
    config = fast_config(str(root / "model"), iterations_per_loop=10, tf_random_seed=0)

    host_calls = []

    def make(use_tpu):
        return jaxspec.TPUEstimator(
            model_fn=digits.make_model_fn(lambda *args: host_calls.append(args)),
            config=config,
            use_tpu=use_tpu,
            train_batch_size=64,
            eval_batch_size=64,
            predict_batch_size=64,
            init_fn=digits.init_fn,
        )

    # Train off the mesh (one compile of one device: quicker); export, predict and
    # evaluate with the mesh TPUEstimator, whose export is its CPU graph.
    make(False).train(digits.make_input_fn(x_train, y_train, training=True), max_steps=10)
    est = make(True)
    host_calls.clear()
    eval_input_fn = digits.make_input_fn(x_test, y_test, training=False)
    supervised = tf_bridge.build_supervised_input_receiver_fn_from_input_fn(
        eval_input_fn, params={"batch_size": 64}
    )
    serving = tf_bridge.build_parsing_serving_input_receiver_fn(
        {"x": tf.io.FixedLenFeature([64], tf.float32)}
    )
    path = est.experimental_export_all_saved_models(
        str(root / "export"), {TRAIN: supervised, EVAL: supervised, PREDICT: serving}
    ).decode()
    return {
        "est": est,
        "path": path,
        "x": x_test,
        "y": y_test,
        "eval_input_fn": eval_input_fn,
        "host_calls": host_calls,
    }


def test_signature_defs_equal_tf_estimators_but_int_width(model):
    assert differences(describe(model["path"]), REFERENCE["digits"]["all"]) == KNOWN
    assert REFERENCE["digits"]["predict"]["serve"] == REFERENCE["digits"]["all"]["serve"]


def test_serving_equals_predict_at_batch_1_7_300(model):
    x = model["x"][:300]
    predictions = list(
        model["est"].predict(
            lambda params: (
                {"x": x[s : s + params["batch_size"]]} for s in range(0, len(x), params["batch_size"])
            )
        )
    )
    probabilities = np.stack([p["probabilities"] for p in predictions])
    class_ids = np.array([p["class_ids"] for p in predictions])
    loaded = tf.saved_model.load(model["path"], tags=["serve"])
    for batch in (1, 7, 300):  # each example's prediction does not depend on its batch
        examples = serialize(x[:batch])
        served = loaded.signatures["serving_default"](examples=examples)
        classified = loaded.signatures["classification"](inputs=examples)
        assert served["class_ids"].shape == (batch,)
        np.testing.assert_array_equal(served["class_ids"].numpy(), class_ids[:batch])
        np.testing.assert_allclose(served["probabilities"].numpy(), probabilities[:batch], rtol=0, atol=1e-5)
        np.testing.assert_allclose(classified["scores"].numpy(), probabilities[:batch], rtol=0, atol=1e-5)
        assert classified["classes"].numpy().astype(str).tolist() == [digits.CLASS_NAMES] * batch


def test_eval_graph_streams_the_mesh_evaluation(model):
    want = model["est"].evaluate(model["eval_input_fn"])
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        sig = tf.compat.v1.saved_model.loader.load(session, ["eval"], model["path"]).signature_def["eval"]
        x, y = model["x"], model["y"]
        for s in range(0, len(x), 100):  # other batches than the mesh's 64: the state streams
            session.run(
                [sig.outputs[f"metrics/{m}/update_op"].name for m in ("accuracy", "mean_max_probability")],
                {sig.inputs["x"].name: x[s : s + 100], sig.inputs["label"].name: y[s : s + 100]},
            )
        got = session.run(
            {m: sig.outputs[f"metrics/{m}/value"].name for m in ("accuracy", "mean_max_probability")}
        )
    np.testing.assert_allclose(got["accuracy"], want["accuracy"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["mean_max_probability"], want["mean_max_probability"], rtol=0, atol=1e-5)


def test_train_graph_steps_in_tf_without_the_host_call(model):
    """The TRAIN meta graph runs model_fn's training step (TrainState + Adam) in TF; the
    host_call of the TPUEstimatorSpec never reaches the graph (no host function runs)."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        sig = tf.compat.v1.saved_model.loader.load(session, ["train"], model["path"]).signature_def["train"]
        (train_op,) = graph.get_collection("saved_model_train_op")
        feed = {sig.inputs["x"].name: model["x"][:64], sig.inputs["label"].name: model["y"][:64]}
        losses = [session.run([sig.outputs["loss"].name, train_op], feed)[0] for _ in range(5)]
        step = session.run(tf.compat.v1.train.get_global_step())
        ops = {op.type for op in graph.get_operations()}
    assert step == 15  # restored at 10, five steps
    assert losses[-1] < losses[0]  # the same batch five times: Adam lowers its loss
    assert model["host_calls"] == []
    assert not any("Callback" in t or "PyFunc" in t for t in ops)
