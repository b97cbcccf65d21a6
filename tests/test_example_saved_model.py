"""The digits example's SavedModel: signature keys, method names, outputs == predict."""

from __future__ import annotations

import os

import pytest

tf = pytest.importorskip("tensorflow")

import tf_bridge  # noqa: E402
from examples import digits  # noqa: E402


def test_example_model_round_trip(tmp_path):
    x_train, y_train, x_test, _ = digits.load_data()
    est = digits.make_estimator(str(tmp_path))
    est.train(digits.make_input_fn(x_train, y_train, training=True), max_steps=20)
    x = x_test[:45]  # 45 is not a multiple of the predict batch: padded on the mesh
    predictions = list(
        est.predict(
            lambda params: (
                {"x": x[s : s + params["batch_size"]]} for s in range(0, len(x), params["batch_size"])
            )
        )
    )
    assert len(predictions) == 45

    receiver = tf_bridge.build_parsing_serving_input_receiver_fn(
        {"x": tf.io.FixedLenFeature([64], tf.float32)}
    )
    export_dir = est.export_saved_model(str(tmp_path / "export"), receiver).decode()
    assert os.path.basename(export_dir).isdigit()

    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], export_dir)
    sigs = meta.signature_def
    assert set(sigs) == {"serving_default", "classification"}
    assert sigs["classification"].method_name == "tensorflow/serving/classify"
    assert set(sigs["classification"].inputs) == {"inputs"}
    assert set(sigs["classification"].outputs) == {"classes", "scores"}
    assert sigs["serving_default"].method_name == "tensorflow/serving/predict"
    assert set(sigs["serving_default"].inputs) == {"examples"}
    assert set(sigs["serving_default"].outputs) == {"class_ids", "probabilities"}

    assert digits.serve_and_compare(export_dir, x, predictions) <= 1e-5
