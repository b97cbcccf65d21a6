"""The validation report (``assets.extra/jaxspec_validation.json``): every PREDICT export
runs the written SavedModel (TF) and the JAX model on the same rows and compares every
output; a SavedModel whose variable was perturbed fails (no export left) unless
``validate='warn'``."""

from __future__ import annotations

import json
import logging
import os

import jax
import jaxlib
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from tests.helpers import digits, fast_config  # noqa: E402
from tests.slim_export_model import input_fn, make_init_fn, model_fn  # noqa: E402
from tf_bridge.export import saved_model as _saved_model  # noqa: E402

X, Y = digits(16)
ROWS = [{"x": X[i]} for i in range(6)]
REPORT = os.path.join("assets.extra", "jaxspec_validation.json")
PARSING = tf_bridge.build_parsing_serving_input_receiver_fn({"x": tf.io.FixedLenFeature([64], tf.float32)})
RAW = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
SHIFT = 0.05  # added to the first SavedModel variable (a Dense bias or kernel) by `perturbed`


@pytest.fixture(scope="module")
def est(tmp_path_factory):
    root = tmp_path_factory.mktemp("validation")
    est = jaxspec.Estimator(
        model_fn, str(root / "model"), config=fast_config(str(root / "model")), init_fn=make_init_fn(16)
    )
    est.train(input_fn(X, Y, 8), steps=3)
    return est


@pytest.fixture
def perturbed(monkeypatch):
    """The SavedModel's variables are written with every value shifted by SHIFT: TF's
    answers then differ from the JAX model's."""
    write = _saved_model._write

    def shifted(temp_dir, graphs, values, global_step, as_text):
        values = [np.asarray(v) + np.asarray(SHIFT, np.asarray(v).dtype) for v in values]
        return write(temp_dir, graphs, values, global_step, as_text)

    monkeypatch.setattr(_saved_model, "_write", shifted)


def _report(path: str) -> dict:
    with open(os.path.join(path, REPORT)) as f:
        return json.load(f)


def _tf_logits(path: str) -> np.ndarray:
    loaded = tf.saved_model.load(path, tags=["serve"])
    return loaded.signatures["serving_default"](x=tf.constant(np.stack([r["x"] for r in ROWS])))[
        "logits"
    ].numpy()


def _jax_logits(est) -> np.ndarray:
    x = np.stack([r["x"] for r in ROWS])
    return np.stack([p["logits"] for p in est.predict(lambda: iter([{"x": x}]))])


def test_report_says_what_was_compared(est, tmp_path):
    path = est.export_saved_model(str(tmp_path / "ok"), PARSING, warmup_requests=ROWS).decode()
    report = _report(path)
    assert report["passed"] and report["failed"] == [] and report["rows"] == len(ROWS)
    assert report["versions"] == {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "tensorflow": tf.__version__,
    }
    jax_side = report["references"]["jax"]
    assert sorted(jax_side) == ["classify", "serving_default"]
    logits = jax_side["serving_default"]["outputs"]["logits"]
    assert logits["dtype"] == "float32" and logits["rtol"] == 1e-5 and logits["passed"]
    assert logits["max_abs_diff"] <= 1e-5
    # TF's string classes are not JAX's output: listed, not compared.
    assert jax_side["classify"]["not_compared"] == ["classes"]
    assert jax_side["classify"]["outputs"]["scores"]["passed"]


def test_perturbed_variable_fails_and_leaves_no_export(est, tmp_path, perturbed):
    base = tmp_path / "bad"
    with pytest.raises(tf_bridge.ExportValidationError, match="serving_default/logits"):
        est.export_saved_model(str(base), RAW, warmup_requests=ROWS)
    assert not base.exists()


def test_warn_logs_and_keeps_the_export_with_the_differences(est, tmp_path, perturbed, caplog):
    with caplog.at_level(logging.WARNING, logger="tf_bridge"):
        path = est.export_saved_model(
            str(tmp_path / "warn"), RAW, warmup_requests=ROWS, validate="warn"
        ).decode()
    assert "validate='warn'" in caplog.text
    report = _report(path)
    assert not report["passed"] and "jax:serving_default/logits" in report["failed"]
    entry = report["references"]["jax"]["serving_default"]["outputs"]["logits"]
    tf_out, jax_out = _tf_logits(path), _jax_logits(est)
    diff = np.abs(tf_out.astype(np.float64) - jax_out)
    assert diff.max() > 1e-3  # the shift reached the answers
    np.testing.assert_allclose(entry["max_abs_diff"], diff.max(), rtol=1e-4)
    np.testing.assert_allclose(entry["max_rel_diff"], (diff / np.abs(jax_out)).max(), rtol=1e-4)


def test_tolerance_override_and_validate_false(est, tmp_path, perturbed):
    path = est.export_saved_model(
        str(tmp_path / "loose"), RAW, warmup_requests=ROWS, validation_tolerances={"float32": 1e6}
    ).decode()
    assert _report(path)["references"]["jax"]["serving_default"]["outputs"]["logits"]["rtol"] == 1e6
    path = est.export_saved_model(str(tmp_path / "off"), RAW, validate=False).decode()
    assert not os.path.exists(os.path.join(path, REPORT))


def test_bad_validate_arguments_raise_before_writing(est, tmp_path):
    with pytest.raises(ValueError, match="validate"):
        est.export_saved_model(str(tmp_path / "a"), RAW, validate="maybe")
    with pytest.raises(ValueError, match="validation_tolerances"):
        est.export_saved_model(str(tmp_path / "b"), RAW, validation_tolerances={"int8": 0.1})
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_jax_artifact_is_validated_too(est, tmp_path):
    path = est.export_saved_model(
        str(tmp_path / "art"), PARSING, jax_artifact=True, warmup_requests=ROWS
    ).decode()
    report = _report(path)
    assert report["passed"]
    artifact = report["references"]["jax_artifact"]
    # The artifact makes the string classes as TF does: compared exactly.
    assert artifact["classify"]["outputs"]["classes"]["passed"]
    assert artifact["classify"]["outputs"]["classes"]["max_abs_diff"] is None
    assert artifact["serving_default"]["outputs"]["logits"]["max_abs_diff"] <= 1e-5


def test_string_input_that_is_not_examples_is_skipped_not_failed(tmp_path, caplog):
    """A receiver that looks words up in a table takes a string tensor that is no
    tf.Example: validation cannot make its input from feature rows, says so in
    ``skipped`` and a warning, and keeps the export; warmup rows for it raise."""
    state = {"table": np.array([10.0, 20.0, 30.0, -1.0], np.float32)}

    def receiver_fn():
        words = tf.compat.v1.placeholder(tf.string, [None], name="words")
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(["zero", "one", "two"], [0, 1, 2], tf.string, tf.int64), 3
        )
        return tf_bridge.ServingInputReceiver(
            {"ids": tf.cast(table.lookup(words), tf.int32)}, {"words": words}
        )

    def fn(state, features):
        return {"serving_default": {"value": state["table"][features["ids"]]}}

    heads = {"serving_default": jaxspec.export.PredictOutput(np.zeros((1,), np.float32))}
    with caplog.at_level(logging.WARNING, logger="tf_bridge"):
        path = tf_bridge.export_saved_model(str(tmp_path / "words"), receiver_fn, fn, state, heads).decode()
    report = _report(path)
    assert report["passed"] and list(report["skipped"]) == ["serving_default"]
    assert "not compared" in caplog.text
    base = tmp_path / "words_warmup"
    with pytest.raises(ValueError, match="tf.Examples"):
        tf_bridge.export_saved_model(str(base), receiver_fn, fn, state, heads, warmup_requests=1)
    assert not base.exists()


def test_exporter_passes_warmup_and_validation(est, tmp_path):
    exporter = jaxspec.LatestExporter("latest", RAW, warmup_requests=ROWS[:2])
    path = exporter.export(est, str(tmp_path / "exp"), est.latest_checkpoint(), {}, False).decode()
    assert _report(path)["passed"]
    records = list(tf.data.TFRecordDataset(os.path.join(path, "assets.extra", "tf_serving_warmup_requests")))
    assert len(records) == 2
