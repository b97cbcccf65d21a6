"""train_and_evaluate: throttled and every-N-steps evaluation, several EvalSpecs, exporters."""

from __future__ import annotations

import os

import pytest

import jaxspec
from jaxspec.exporter import BestExporter, FinalExporter, LatestExporter
from jaxspec.training import EvalSpec, TrainSpec, train_and_evaluate
from tests.helpers import batches_input_fn, digits, init_fn, make_model_fn

tf = pytest.importorskip("tensorflow")
import tf_bridge  # noqa: E402


def _estimator(model_dir):
    config = jaxspec.RunConfig(model_dir=model_dir, save_checkpoints_steps=4, log_step_count_steps=None)
    return jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)


def _receiver():
    return tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})


def test_every_n_steps_with_exporters_and_two_eval_specs(tmp_path):
    x, y = digits(64)
    est = _estimator(str(tmp_path))
    train = TrainSpec(batches_input_fn(x, y, 32, repeat=True), max_steps=12)
    evals = [
        EvalSpec(
            batches_input_fn(x[:32], y[:32], 16),
            steps=None,
            name="first_half",
            every_n_steps=4,
            exporters=[
                LatestExporter("latest", _receiver(), exports_to_keep=2),
                FinalExporter("final", _receiver()),
            ],
        ),
        EvalSpec(
            batches_input_fn(x[32:], y[32:], 16),
            steps=None,
            name="second_half",
            every_n_steps=6,
            exporters=BestExporter(serving_input_receiver_fn=_receiver()),
        ),
    ]
    (first, first_exports), (second, second_exports) = train_and_evaluate(est, train, evals)
    assert first["global_step"] == second["global_step"] == 12
    assert first == pytest.approx(est.evaluate(batches_input_fn(x[:32], y[:32], 16)))
    latest = sorted(os.listdir(tmp_path / "export" / "latest"))
    assert len(latest) == 2  # evaluations at 4, 8, 12 and the final one; two kept
    assert len(os.listdir(tmp_path / "export" / "final")) == 1
    assert first_exports[1] is not None and first_exports[1].decode().startswith(
        str(tmp_path / "export" / "final")
    )
    assert os.path.isdir(tmp_path / "eval_first_half") and os.path.isdir(tmp_path / "eval_second_half")
    assert len(os.listdir(tmp_path / "export" / "best_exporter")) >= 1


def test_throttled_local_run(tmp_path):
    x, y = digits(64)
    est = _estimator(str(tmp_path))
    metrics, exports = train_and_evaluate(
        est,
        TrainSpec(batches_input_fn(x, y, 32, repeat=True), max_steps=8),
        EvalSpec(batches_input_fn(x, y, 32), steps=1, throttle_secs=0),
    )
    assert metrics["global_step"] == 8 and exports == []
    assert 0.0 <= metrics["accuracy"] <= 1.0


def test_spec_validation():
    with pytest.raises(ValueError):
        TrainSpec(lambda: None, max_steps=0)
    with pytest.raises(ValueError):
        EvalSpec(lambda: None, steps=0)
    with pytest.raises(TypeError):
        EvalSpec(lambda: None, exporters=["not an exporter"])
    with pytest.raises(ValueError):
        BestExporter(compare_fn=lambda a, b: True)
