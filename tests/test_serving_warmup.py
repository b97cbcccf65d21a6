"""TF Serving warmup records (``assets.extra/tf_serving_warmup_requests``): read back with
``tf.data.TFRecordDataset`` and TF Serving's ``PredictionLog``, replayed through the
SavedModel's signatures and compared with ``est.predict`` on the same rows."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
prediction_log_pb2 = pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from tests.helpers import digits, fast_config  # noqa: E402
from tests.slim_export_model import input_fn, make_init_fn, model_fn  # noqa: E402

X, Y = digits(16)
ROWS = [{"x": X[i]} for i in range(5)]
WARMUP = os.path.join("assets.extra", "tf_serving_warmup_requests")
PARSING = tf_bridge.build_parsing_serving_input_receiver_fn({"x": tf.io.FixedLenFeature([64], tf.float32)})
RAW = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})


@pytest.fixture(scope="module")
def est(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmup")
    est = jaxspec.Estimator(
        model_fn, str(root / "model"), config=fast_config(str(root / "model")), init_fn=make_init_fn(16)
    )
    est.train(input_fn(X, Y, 8), steps=3)
    return est


def _records(export_dir: str) -> list:
    dataset = tf.data.TFRecordDataset(os.path.join(export_dir, WARMUP))
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in dataset]


def _logits(est, rows) -> np.ndarray:
    x = np.stack([r["x"] for r in rows])
    return np.stack([p["logits"] for p in est.predict(lambda: iter([{"x": x}]))])


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _replay(export_dir: str, log) -> tuple[str, dict]:
    """Run one warmup record through the loaded SavedModel as TF Serving would."""
    loaded = tf.saved_model.load(export_dir, tags=["serve"])
    kind = log.WhichOneof("log_type")
    request = getattr(log, kind).request
    signature = loaded.signatures[request.model_spec.signature_name]
    if kind == "predict_log":
        feed = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    else:
        examples = [e.SerializeToString() for e in request.input.example_list.examples]
        feed = {"inputs": tf.constant(examples)}
    return request.model_spec.signature_name, {k: v.numpy() for k, v in signature(**feed).items()}


def test_parsing_receiver_records_replay_as_predict(est, tmp_path):
    path = est.export_saved_model(str(tmp_path / "parsing"), PARSING, warmup_requests=ROWS).decode()
    logs = _records(path)
    kinds = sorted(
        (
            log.WhichOneof("log_type"),
            getattr(log, log.WhichOneof("log_type")).request.model_spec.signature_name,
        )
        for log in logs
    )
    assert kinds == [("classify_log", "classify")] * 5 + [("predict_log", "serving_default")] * 5
    want = _logits(est, ROWS)
    seen = {"classify": [], "serving_default": []}
    for log in logs:
        key, out = _replay(path, log)
        seen[key].append(out["scores"][0] if key == "classify" else out["logits"][0])
    np.testing.assert_allclose(np.stack(seen["serving_default"]), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.stack(seen["classify"]), _softmax(want), rtol=1e-5, atol=1e-6)
    # The parsing receiver's predict signature takes serialized tf.Examples of the rows.
    request = next(log.predict_log.request for log in logs if log.HasField("predict_log"))
    (serialized,) = tf.make_ndarray(request.inputs["examples"])
    np.testing.assert_array_equal(
        tf.train.Example.FromString(serialized).features.feature["x"].float_list.value, X[0]
    )


def test_raw_receiver_records_hold_tensors_by_input_name(est, tmp_path):
    path = est.export_saved_model(str(tmp_path / "raw"), RAW, warmup_requests=ROWS).decode()
    logs = _records(path)
    # classify needs a string input: TF leaves it out for a raw receiver, so no record either.
    assert {log.WhichOneof("log_type") for log in logs} == {"predict_log"}
    assert len(logs) == 5
    got = np.concatenate([_replay(path, log)[1]["logits"] for log in logs])
    np.testing.assert_allclose(got, _logits(est, ROWS), rtol=1e-5, atol=1e-6)
    assert list(logs[0].predict_log.request.inputs) == ["x"]


def test_int_requests_send_the_receivers_example(est, tmp_path):
    path = est.export_saved_model(str(tmp_path / "int"), PARSING, warmup_requests=2).decode()
    logs = _records(path)
    assert len(logs) == 4  # 2 per serving signature
    examples = logs[0].classify_log.request.input.example_list.examples
    assert list(examples[0].features.feature["x"].float_list.value) == [0.0] * 64


def test_int_requests_use_the_parse_defaults(est, tmp_path):
    """A FixedLenFeature's default_value is the plausible row (zeros where none)."""
    spec = {"x": tf.io.FixedLenFeature([64], tf.float32, default_value=np.linspace(0, 1, 64))}
    receiver = tf_bridge.build_parsing_serving_input_receiver_fn(spec)
    path = est.export_saved_model(str(tmp_path / "defaults"), receiver, warmup_requests=1).decode()
    log = next(log for log in _records(path) if log.HasField("classify_log"))
    got = log.classify_log.request.input.example_list.examples[0].features.feature["x"].float_list.value
    np.testing.assert_allclose(got, np.linspace(0, 1, 64).astype(np.float32))
    key, out = _replay(path, log)
    np.testing.assert_allclose(
        out["scores"][0], _softmax(_logits(est, [{"x": np.linspace(0, 1, 64)}]))[0], rtol=1e-5, atol=1e-6
    )


def test_more_than_1000_requests_raise_before_anything_is_written(est, tmp_path):
    base = tmp_path / "too_many"
    with pytest.raises(ValueError, match="warmup_requests"):
        est.export_saved_model(str(base), RAW, warmup_requests=1001)
    with pytest.raises(ValueError, match="warmup_requests"):
        est.export_saved_model(str(base), RAW, warmup_requests=[{"x": X[0]}] * 1001)
    assert not base.exists()


def test_rows_that_do_not_fit_leave_no_export(est, tmp_path):
    base = tmp_path / "bad_rows"
    with pytest.raises(ValueError, match=r"warmup_requests\[0\]"):
        est.export_saved_model(str(base), RAW, warmup_requests=[{"y": X[0]}])
    assert not base.exists()


def test_missing_serving_api_names_the_tf_extra(est, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_serving.apis", None)
    base = tmp_path / "no_api"
    with pytest.raises(ImportError, match=r"jaxspec\[tf\]"):
        est.export_saved_model(str(base), RAW, warmup_requests=1)
    assert not base.exists()


def _tf_model_fn(features, labels, mode):
    kernel = tf.compat.v1.get_variable(
        "kernel", [4, 3], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1)
    )
    logits = tf.matmul(features["x"], kernel)
    if mode == tf_bridge.ModeKeys.PREDICT:
        return tf_bridge.EstimatorSpec(
            mode,
            predictions={"logits": logits},
            export_outputs={"serving_default": tf_bridge.PredictOutput({"logits": logits})},
        )
    loss = tf.reduce_mean(tf.square(logits - tf.cast(labels[:, None], tf.float32)))
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return tf_bridge.EstimatorSpec(mode, loss=loss, train_op=train_op)


def test_tf_model_fn_export_writes_warmup(tmp_path):
    x = X[:8, :4]
    est = tf_bridge.Estimator(_tf_model_fn, model_dir=str(tmp_path / "tf_model"))
    est.train(lambda: tf.data.Dataset.from_tensor_slices(({"x": x}, Y[:8])).batch(4), steps=2)
    raw = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 4], tf.float32)})
    rows = [{"x": x[i]} for i in range(3)]
    path = est.export_saved_model(str(tmp_path / "tf_export"), raw, warmup_requests=rows).decode()
    logs = _records(path)
    assert len(logs) == 3
    got = np.concatenate([_replay(path, log)[1]["logits"] for log in logs])
    want = np.stack(
        [p["logits"] for p in est.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": x[:3]}).batch(3))]
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # tf_bridge's exporters (jaxspec's classes) pass warmup_requests to a TF Estimator.
    exporter = tf_bridge.LatestExporter("latest", raw, warmup_requests=2)
    exported = exporter.export(est, str(tmp_path / "tf_exporter"), est.latest_checkpoint(), {}, False)
    assert len(_records(exported.decode())) == 2
    base = tmp_path / "tf_too_many"
    with pytest.raises(ValueError, match="warmup_requests"):
        est.export_saved_model(str(base), raw, warmup_requests=1001)
    assert not base.exists()
