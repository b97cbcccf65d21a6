"""tf_bridge.train_and_evaluate on TensorFlow model_fns: the evaluation schedule
tf.estimator's local run follows (the save made at session creation skipped, throttling,
one evaluation and export per checkpoint, a last one at the end), the exporters, the
return value, and the tf.estimator namespace. Expected values: TensorFlow's own (a
separate evaluate of the same checkpoint, the SavedModel loaded by tf.saved_model)."""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import jaxspec
import tf_bridge
import tf_bridge.estimator as tf_estimator
from tools import tf215_reference_models as models


class Recorder(tf_bridge.Exporter):
    """Records each export call; writes nothing."""

    def __init__(self, name: str = "recorder") -> None:
        self._name = name
        self.calls: list[tuple[str, int, bool]] = []

    @property
    def name(self) -> str:
        return self._name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        self.calls.append((checkpoint_path, int(eval_result["global_step"]), is_the_final_export))
        return None


def make_est(model_dir: Any, **config: Any) -> tf_bridge.Estimator:
    cfg = tf_bridge.RunConfig(tf_random_seed=1, log_step_count_steps=None, **config)
    return tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(model_dir), config=cfg)


def eval_steps(directory: Any) -> list[int]:
    """Global steps of the evaluation events (those with a ``loss``) under ``directory``."""
    steps = []
    for name in glob.glob(os.path.join(str(directory), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(name):
            if any(v.tag == "loss" for v in event.summary.value):
                steps.append(event.step)
    return sorted(steps)


def test_local_run_evaluates_each_checkpoint_once_and_exports(tmp_path: Any) -> None:
    est = make_est(tmp_path, save_checkpoints_steps=3)
    recorder = Recorder()
    latest = tf_bridge.LatestExporter(
        "latest", models.serving_input_receiver_fn(tf_bridge), exports_to_keep=2
    )
    result, exports = tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=9),
        tf_bridge.EvalSpec(models.eval_input_fn, steps=None, throttle_secs=0, exporters=[recorder, latest]),
    )
    # TF's CheckpointSaverHook saves at step 0 when the session is created: not evaluated.
    assert [(step, final) for _, step, final in recorder.calls] == [(3, False), (6, False), (9, True)]
    assert [os.path.basename(p) for p, _, _ in recorder.calls] == [
        "model.ckpt-3",
        "model.ckpt-6",
        "model.ckpt-9",
    ]
    assert eval_steps(tmp_path / "eval") == [3, 6, 9]
    assert result["global_step"] == 9
    again = est.evaluate(models.eval_input_fn, name="again")
    assert set(result) == set(again) and all(np.allclose(result[k], again[k]) for k in result)
    assert exports[0] is None and exports[1].startswith(os.fsencode(tmp_path / "export" / "latest"))
    assert len(os.listdir(tmp_path / "export" / "latest")) == 2  # exports_to_keep
    # The regression head needs a serialized-Example input, so TF keeps only "all".
    serve = tf.saved_model.load(exports[1].decode()).signatures["all"]
    served = serve(x=tf.constant(models.predict_data()))["pred"].numpy()[:, 0]
    predicted = np.array([p["pred"] for p in est.predict(models.predict_input_fn)])
    np.testing.assert_allclose(served, predicted, rtol=1e-6)


def test_throttle_skips_saves_and_the_end_evaluates_the_last(tmp_path: Any) -> None:
    est = make_est(tmp_path, save_checkpoints_steps=2)
    recorder = Recorder()
    result, exports = tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=7),
        tf_bridge.EvalSpec(
            models.eval_input_fn, steps=2, throttle_secs=3600, exporters=recorder, name="slow"
        ),
    )
    # The first save after step 0 is evaluated, then throttled; the end evaluates step 7.
    assert [(step, final) for _, step, final in recorder.calls] == [(2, False), (7, True)]
    assert eval_steps(tmp_path / "eval_slow") == [2, 7]
    assert result["global_step"] == 7 and exports == [None]


def test_input_end_before_max_steps_and_max_steps_none(tmp_path: Any) -> None:
    x, y = models.train_data()

    def six_batches() -> Any:
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)  # 24 rows: 6 steps

    est = make_est(tmp_path, save_checkpoints_steps=4)
    recorder = Recorder()
    result, _ = tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(six_batches),
        tf_bridge.EvalSpec(models.eval_input_fn, steps=None, throttle_secs=0, exporters=recorder),
    )
    # Evaluations at 4 and at the end (6); without max_steps no export is final (as TF).
    assert [(step, final) for _, step, final in recorder.calls] == [(4, False), (6, False)]
    assert result["global_step"] == 6


def test_already_at_max_steps_returns_none_pair(tmp_path: Any) -> None:
    est = make_est(tmp_path, save_checkpoints_steps=3)
    est.train(models.train_input_fn, max_steps=3)
    recorder = Recorder()
    assert tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=3),
        tf_bridge.EvalSpec(models.eval_input_fn, exporters=recorder),
    ) == (None, None)
    assert recorder.calls == []


def test_best_exporter_returns_the_directory_it_wrote(tmp_path: Any) -> None:
    est = make_est(tmp_path, save_checkpoints_steps=3)
    best = tf_bridge.BestExporter(
        serving_input_receiver_fn=models.serving_input_receiver_fn(tf_bridge), exports_to_keep=None
    )
    result, exports = tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=6),
        tf_bridge.EvalSpec(models.eval_input_fn, steps=None, throttle_secs=0, exporters=best),
    )
    written = sorted(os.listdir(tmp_path / "export" / "best_exporter"))
    assert len(written) == 2  # the loss fell from step 3 to step 6: both exported
    assert exports[0] == os.path.join(str(tmp_path), "export", "best_exporter", written[-1]).encode()


def test_saving_listener_and_hooks_of_the_train_spec_run(tmp_path: Any) -> None:
    class Listener(tf.compat.v1.train.CheckpointSaverListener):
        def __init__(self) -> None:
            self.saved: list[int] = []

        def after_save(self, session, global_step_value):
            self.saved.append(global_step_value)

    listener = Listener()
    est = make_est(tmp_path, save_checkpoints_steps=2)
    tf_bridge.train_and_evaluate(
        est,
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=4, saving_listeners=[listener]),
        tf_bridge.EvalSpec(models.eval_input_fn, steps=1, throttle_secs=0),
    )
    assert listener.saved == [0, 2, 4]


def test_type_and_value_checks() -> None:
    est = make_est(None)
    train = tf_bridge.TrainSpec(models.train_input_fn)
    evals = tf_bridge.EvalSpec(models.eval_input_fn)
    with pytest.raises(TypeError):
        tf_bridge.train_and_evaluate(object(), train, evals)
    with pytest.raises(TypeError):
        tf_bridge.train_and_evaluate(est, jaxspec.TrainSpec(models.train_input_fn), evals)
    with pytest.raises(TypeError):
        tf_bridge.train_and_evaluate(est, train, object())
    with pytest.raises(TypeError):
        tf_bridge.TrainSpec(models.train_input_fn, hooks=[jaxspec.hooks.StopAtStepHook(1)])
    with pytest.raises(TypeError):
        tf_bridge.TrainSpec(models.train_input_fn, saving_listeners=[object()])
    with pytest.raises(TypeError):
        tf_bridge.TrainSpec("not callable")
    with pytest.raises(ValueError):
        tf_bridge.TrainSpec(models.train_input_fn, max_steps=-1)
    with pytest.raises(TypeError):
        tf_bridge.EvalSpec(models.eval_input_fn, name=1)
    with pytest.raises(ValueError):
        tf_bridge.EvalSpec(models.eval_input_fn, start_delay_secs=-1)
    with pytest.raises(ValueError):
        tf_bridge.EvalSpec(models.eval_input_fn, exporters=[Recorder("a"), Recorder("a")])
    spec = tf_bridge.EvalSpec(models.eval_input_fn, hooks=[tf.compat.v1.train.StopAtStepHook(1)])
    assert isinstance(spec.hooks, tuple) and spec.steps == 100 and spec.throttle_secs == 600


def test_tf_estimator_namespace() -> None:
    assert tf_estimator.train_and_evaluate is tf_bridge.train_and_evaluate
    assert tf_estimator.Estimator is tf_bridge.Estimator and tf_estimator.RunConfig is tf_bridge.RunConfig
    assert tf_estimator.CheckpointSaverListener is tf.compat.v1.train.CheckpointSaverListener
    assert tf_estimator.experimental.InMemoryEvaluatorHook is tf_bridge.runtime.hooks.InMemoryEvaluatorHook
    assert tf_estimator.export.ServingInputReceiver is tf_bridge.ServingInputReceiver
    assert tf_estimator.tpu.TPUEstimator is tf_bridge.TPUEstimator
    assert tf_estimator.ModeKeys.TRAIN == "train"


def test_best_exporter_first_export_without_eval_result_and_garbage_collection(tmp_path: Any) -> None:
    """As tf.estimator's BestExporter: the first export happens whatever the result (even
    None), and only the newest ``exports_to_keep`` timestamped directories remain."""
    est = make_est(tmp_path / "model", save_checkpoints_steps=3)
    est.train(models.train_input_fn, max_steps=3)
    export_path = tmp_path / "export"
    old = [export_path / str(1_500_000_000 + i) for i in range(4)]
    for path in old:
        path.mkdir(parents=True)
    best = tf_bridge.BestExporter(
        serving_input_receiver_fn=models.serving_input_receiver_fn(tf_bridge), exports_to_keep=2
    )
    written = best.export(est, str(export_path), est.latest_checkpoint(), None, False)
    assert written is not None and os.path.isfile(os.path.join(written.decode(), "saved_model.pb"))
    assert sorted(os.listdir(export_path)) == [old[-1].name, os.path.basename(written.decode())]
