"""train_and_evaluate: throttled and every-N-steps evaluation, several EvalSpecs, exporters."""

from __future__ import annotations

import os

import pytest

import jaxspec
from jaxspec.estimators.exporter import BestExporter, FinalExporter, LatestExporter
from jaxspec.estimators.training import EvalSpec, TrainSpec, train_and_evaluate
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


class _Recorder(jaxspec.Exporter):
    """Records each call; returns a fake directory name so results can be traced."""

    def __init__(self, name):
        self._name, self.calls = name, []

    @property
    def name(self):
        return self._name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        self.calls.append((checkpoint_path, int(eval_result["global_step"]), is_the_final_export))
        return f"{export_path}/{eval_result['global_step']}".encode()


def test_each_checkpoint_evaluated_and_exported_once_and_the_last_result_returned(tmp_path):
    """The input ends at step 6 (before max_steps=20), where a checkpoint was just evaluated:
    no second evaluation or export of it (the old final pass), and what is returned is that
    evaluation with the directories its exporters wrote."""
    x, y = digits(64)
    est = _estimator(str(tmp_path))
    recorder = _Recorder("rec")
    best = BestExporter(serving_input_receiver_fn=_receiver(), exports_to_keep=None)
    metrics, exports = train_and_evaluate(
        est,
        TrainSpec(batches_input_fn(x[:48], y[:48], 8), max_steps=20),  # 6 batches, then the input ends
        EvalSpec(batches_input_fn(x, y, 32), steps=None, throttle_secs=0, exporters=[recorder, best]),
    )
    steps = [step for _, step, _ in recorder.calls]
    assert steps == [4, 6]  # checkpoints every 4 steps, and the last one at 6
    assert len({path for path, _, _ in recorder.calls}) == 2
    assert [final for _, _, final in recorder.calls] == [False, False]  # 6 < max_steps, as TF
    assert metrics["global_step"] == 6
    assert _eval_steps(tmp_path / "eval") == [4, 6]  # one evaluation per checkpoint in the event files
    assert metrics == pytest.approx(est.evaluate(batches_input_fn(x, y, 32), name="check"))
    assert exports[0] == os.path.join(str(tmp_path), "export", "rec", "6").encode()
    written = sorted(os.listdir(tmp_path / "export" / "best_exporter"))
    if exports[1] is None:  # the evaluation at step 6 was not better than the one at 4
        assert len(written) == 1
    else:  # it was: the returned directory is the SavedModel it wrote
        assert os.path.basename(exports[1].decode()) == written[-1]
        assert os.path.isfile(os.path.join(exports[1].decode(), "saved_model.pb"))


def test_nothing_to_do_returns_none_pair(tmp_path):
    x, y = digits(32)
    est = _estimator(str(tmp_path))
    est.train(batches_input_fn(x, y, 8, repeat=True), max_steps=4)
    recorder = _Recorder("rec")
    result = train_and_evaluate(
        est,
        TrainSpec(batches_input_fn(x, y, 8, repeat=True), max_steps=4),
        EvalSpec(batches_input_fn(x, y, 8), steps=1, exporters=recorder),
    )
    assert result == (None, None) and recorder.calls == []


def test_type_checks_as_tf():
    with pytest.raises(TypeError):
        train_and_evaluate(object(), TrainSpec(lambda: None), EvalSpec(lambda: None))
    with pytest.raises(TypeError):
        EvalSpec(lambda: None, name=3)
    with pytest.raises(TypeError):
        TrainSpec(lambda: None, hooks=[object()])
    with pytest.raises(ValueError):
        EvalSpec(lambda: None, exporters=[_Recorder("a"), _Recorder("a")])
    with pytest.raises(ValueError):
        EvalSpec(lambda: None, exporters=[_Recorder("")])
    with pytest.raises(ValueError):
        EvalSpec(lambda: None, throttle_secs=-1)
    assert EvalSpec(lambda: None, exporters=_Recorder("a")).exporters[0].name == "a"


def _eval_steps(directory):
    """The global steps of the evaluation events (with a ``loss`` value) in ``directory``."""
    steps = []
    for name in os.listdir(directory):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
            if any(v.tag == "loss" for v in event.summary.value):
                steps.append(event.step)
    return sorted(steps)
