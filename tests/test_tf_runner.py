"""tf_bridge.Estimator's contract on the pinned TensorFlow: argument checks, train/evaluate/
predict semantics, summaries, warm start, early stopping, TRAIN/EVAL exports and the
jaxspec <-> TF conversions. Expected values come from TensorFlow itself (its metric ops,
its SupervisedOutput naming, its event files) or from the data."""

from __future__ import annotations

import glob
import logging
import os
import types
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import jaxspec
import tf_bridge
from tf_bridge.export import outputs as convert
from tf_bridge.runtime import hooks as tb_hooks
from tools import tf215_reference_models as models

M = tf_bridge.ModeKeys


def linear_est(model_dir: Any, losses: list[float] | None = None, **config: Any) -> tf_bridge.Estimator:
    cfg = tf_bridge.RunConfig(tf_random_seed=1, **config)
    return tf_bridge.Estimator(
        models.make_linear_model_fn(tf_bridge, [] if losses is None else losses),
        str(model_dir),
        config=cfg,
        params={},
    )


def events(path: str) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, simple_value)] from every event file under ``path``."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name in glob.glob(os.path.join(path, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(name):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def test_constructor_checks(tmp_path: Any) -> None:
    fn = models.make_linear_model_fn(tf_bridge, [])
    with pytest.raises(ValueError, match="config"):
        tf_bridge.Estimator(fn, config="not a config")
    with pytest.raises(ValueError, match="config"):
        tf_bridge.Estimator(fn, config=jaxspec.RunConfig())
    with pytest.raises(ValueError, match="model_fn"):
        tf_bridge.Estimator(None)
    with pytest.raises(ValueError, match="features"):
        tf_bridge.Estimator(lambda x, labels: None)
    with pytest.raises(ValueError, match="params"):
        tf_bridge.Estimator(lambda features: None, params={"a": 1})
    with pytest.raises(ValueError, match="something"):
        tf_bridge.Estimator(lambda features, something: None)
    with pytest.raises(ValueError, match="model_dir"):
        tf_bridge.Estimator(
            fn, str(tmp_path / "a"), config=tf_bridge.RunConfig(model_dir=str(tmp_path / "b"))
        )
    params = {"a": [1]}
    est = tf_bridge.Estimator(lambda features, params: None, params=params)
    params["a"].append(2)
    assert est.params == {"a": [1]} and os.path.isdir(est.model_dir) and est.config.model_dir == est.model_dir
    with pytest.raises(ValueError, match="checkpoint"):
        est.get_variable_names()


def test_train_steps_max_steps_and_argument_errors(tmp_path: Any) -> None:
    losses: list[float] = []
    est = linear_est(tmp_path, losses, log_step_count_steps=1, save_summary_steps=1)
    with pytest.raises(ValueError, match="steps"):
        est.train(models.train_input_fn, steps=2, max_steps=2)
    with pytest.raises(ValueError, match="steps"):
        est.train(models.train_input_fn, steps=0)
    with pytest.raises(ValueError, match="max_steps"):
        est.train(models.train_input_fn, max_steps=-1)
    with pytest.raises(TypeError, match="SessionRunHook"):
        est.train(models.train_input_fn, hooks=["x"], steps=1)
    with pytest.raises(TypeError, match="CheckpointSaverListener"):
        est.train(models.train_input_fn, steps=1, saving_listeners=["x"])
    assert est.latest_checkpoint() is None
    est.train(models.train_input_fn, max_steps=3)
    est.train(models.train_input_fn, max_steps=3)  # absolute: nothing left to do
    assert len(losses) == 3 and int(est.get_variable_value("global_step")) == 3
    logged = events(est.model_dir)
    assert [s for s, _ in logged["loss"]] == [1, 2, 3]  # what SummarySaverHook recorded each step
    np.testing.assert_allclose([v for _, v in logged["loss"]], losses, rtol=1e-6)
    assert "global_step/sec" in logged
    no_saving = linear_est(tmp_path / "nosave", save_checkpoints_steps=None, save_checkpoints_secs=None)
    with pytest.raises(ValueError, match="saving_listeners"):
        no_saving.train(
            models.train_input_fn, steps=1, saving_listeners=[tf.compat.v1.train.CheckpointSaverListener()]
        )


def test_saving_listeners_and_checkpoint_steps(tmp_path: Any) -> None:
    class Listener(tf.compat.v1.train.CheckpointSaverListener):
        def __init__(self) -> None:
            self.steps: list[int] = []

        def after_save(self, session: Any, global_step_value: int) -> None:
            self.steps.append(int(global_step_value))

    listener = Listener()
    est = linear_est(tmp_path, save_checkpoints_steps=2, keep_checkpoint_max=2)
    est.train(models.train_input_fn, steps=5, saving_listeners=[listener])
    assert listener.steps == [0, 2, 4, 5]
    state = tf.train.get_checkpoint_state(est.model_dir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["model.ckpt-4", "model.ckpt-5"]


def test_nan_loss_stops_training(tmp_path: Any) -> None:
    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
        step = tf.compat.v1.train.get_global_step()
        loss = w * tf.where(step >= 1, np.nan, 1.0)
        train_op = tf.compat.v1.assign_add(step, 1)
        return tf_bridge.EstimatorSpec(mode, loss=loss, train_op=train_op)

    est = tf_bridge.Estimator(model_fn, str(tmp_path))
    with pytest.raises(tf.compat.v1.train.NanLossDuringTrainingError):
        est.train(models.train_input_fn, steps=5)


def test_input_and_model_fn_result_errors(tmp_path: Any) -> None:
    est = linear_est(tmp_path)
    with pytest.raises(ValueError, match="features"):
        est.train(lambda: (1, 2, 3), steps=1)
    no_labels = tf_bridge.Estimator(lambda features: None, str(tmp_path / "b"))
    with pytest.raises(ValueError, match="labels"):
        no_labels.train(models.train_input_fn, steps=1)
    wrong = tf_bridge.Estimator(lambda features, labels: "spec", str(tmp_path / "c"))
    with pytest.raises(ValueError, match="EstimatorSpec"):
        wrong.train(models.train_input_fn, steps=1)
    jax_spec = tf_bridge.Estimator(
        lambda features, labels, mode: jaxspec.EstimatorSpec(mode, loss=np.float32(1.0), train_op={}),
        str(tmp_path / "d"),
    )
    with pytest.raises(ValueError, match="EstimatorSpec"):
        jax_spec.train(models.train_input_fn, steps=1)


def test_evaluate_metrics_from_tf_ops_and_event_files(tmp_path: Any) -> None:
    est = linear_est(tmp_path)
    result = est.evaluate(models.eval_input_fn)  # no checkpoint: the initial values
    x, y = models.eval_data()
    pred = x @ np.asarray(models.W0, np.float32) + np.float32(models.B0[0])
    batch_mse = [np.mean((pred[i : i + 4] - y[i : i + 4]) ** 2) for i in (0, 4, 8)]
    assert int(result["global_step"]) == 0
    np.testing.assert_allclose(result["loss"], np.mean(batch_mse), rtol=1e-6)  # mean of batch losses
    np.testing.assert_allclose(result["mae"], np.mean(np.abs(pred - y)), rtol=1e-6)
    logged = events(est.eval_dir())
    assert {"loss", "mae", "rmse"} <= set(logged) and logged["loss"][0][0] == 0
    with pytest.raises(ValueError, match="steps"):
        est.evaluate(models.eval_input_fn, steps=0)

    def with_loss_metric(features: Any, labels: Any, mode: str) -> Any:
        loss = tf.reduce_mean(labels)
        return tf_bridge.EstimatorSpec(
            mode, loss=loss, eval_metric_ops={"loss": tf.compat.v1.metrics.mean(loss)}
        )

    with pytest.raises(ValueError, match="loss"):
        tf_bridge.Estimator(with_loss_metric, str(tmp_path / "b")).evaluate(models.eval_input_fn)


def test_predict_keys_and_lazy_errors(tmp_path: Any) -> None:
    est = linear_est(tmp_path)
    preds = list(est.predict(models.predict_input_fn, predict_keys=["pred"]))
    assert len(preds) == 7 and set(preds[0]) == {"pred"}
    gen = est.predict(models.predict_input_fn, predict_keys=["nope"])
    with pytest.raises(ValueError, match="predict_keys"):
        next(gen)
    gen = est.predict(models.predict_input_fn, hooks=["x"])
    with pytest.raises(TypeError, match="SessionRunHook"):
        next(gen)


def test_warm_start_from_another_model_dir(tmp_path: Any) -> None:
    source = linear_est(tmp_path / "source")
    source.train(models.train_input_fn, steps=3)
    cfg = tf_bridge.RunConfig(tf_random_seed=1)
    ws = tf_bridge.WarmStartSettings(source.model_dir, vars_to_warm_start="w")
    target = tf_bridge.Estimator(
        models.make_linear_model_fn(tf_bridge, []),
        str(tmp_path / "target"),
        config=cfg,
        params={},
        warm_start_from=ws,
    )
    target.train(models.train_input_fn, steps=1)
    ckpt0 = os.path.join(target.model_dir, "model.ckpt-0")
    np.testing.assert_array_equal(tf.train.load_variable(ckpt0, "w"), source.get_variable_value("w"))
    np.testing.assert_allclose(tf.train.load_variable(ckpt0, "b"), models.B0)  # not warm-started
    with pytest.raises(ValueError, match="warm_start_from"):
        tf_bridge.Estimator(lambda features: None, warm_start_from=3)


def test_early_stopping_hook_reads_eval_summaries(tmp_path: Any) -> None:
    est = linear_est(tmp_path)
    est.evaluate(models.eval_input_fn)  # writes loss at step 0 to eval/
    loss0 = tb_hooks.read_eval_metrics(est.eval_dir())[0]["loss"]
    stop = tb_hooks.stop_if_lower_hook(est, "loss", loss0 + 1, run_every_secs=None, run_every_steps=1)
    est.train(models.train_input_fn, steps=20, hooks=[stop])
    assert int(est.get_variable_value("global_step")) == 1
    keep = tb_hooks.stop_if_higher_hook(est, "loss", loss0 + 1, run_every_secs=None, run_every_steps=1)
    est.train(models.train_input_fn, steps=2, hooks=[keep])
    assert int(est.get_variable_value("global_step")) == 3
    with pytest.raises(ValueError, match="run_every"):
        tb_hooks.make_early_stopping_hook(est, lambda: True, run_every_secs=1, run_every_steps=1)
    with pytest.raises(TypeError, match="Estimator"):
        tb_hooks.make_early_stopping_hook(object(), lambda: True)


def _supervised_receiver() -> Any:
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    return types.SimpleNamespace(
        features={"x": x}, labels=y, receiver_tensors={"x": x, "y": y}, receiver_tensors_alternatives=None
    )


def test_export_all_modes_uses_tf_metric_output_names(tmp_path: Any) -> None:
    est = linear_est(tmp_path / "model")
    est.train(models.train_input_fn, steps=1)
    path = est.experimental_export_all_saved_models(
        str(tmp_path / "export"),
        {M.EVAL: _supervised_receiver, M.PREDICT: models.serving_input_receiver_fn(tf_bridge)},
    )
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["eval"], path.decode())
        outputs = set(meta.signature_def["eval"].outputs)
    for name in ("mae", "rmse"):
        assert set(convert.metric_output_keys(name)) <= outputs
    assert "loss" in outputs
    assert convert.metric_name_from_output_key("metrics/mae/update_op") == ("mae", "update_op")
    assert convert.metric_name_from_output_key("loss") is None
    assert os.path.isdir(os.path.join(path.decode(), "variables"))


def test_model_fn_export_writes_its_directory_as_the_jaxspec_writer(tmp_path: Any) -> None:
    """Both SavedModel writers share one export directory helper: a bad assets_extra is
    refused before anything is written (ValueError, nothing left under the base), a good
    one is copied into assets.extra/, and no jaxspec export record is written for a TF
    model_fn."""
    est = linear_est(tmp_path / "model")
    est.train(models.train_input_fn, steps=1)
    serving = models.serving_input_receiver_fn(tf_bridge)
    base = tmp_path / "export"
    with pytest.raises(ValueError, match="does not exist"):
        est.export_saved_model(str(base), serving, assets_extra={"a.txt": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="relative path"):
        est.export_saved_model(str(base), serving, assets_extra={"../a.txt": __file__})
    assert not base.exists()
    path = est.export_saved_model(str(base), serving, assets_extra={"notes/a.txt": __file__}).decode()
    assert os.listdir(base) == [os.path.basename(path)] and os.path.basename(path).isdigit()
    with open(os.path.join(path, "assets.extra", "notes", "a.txt")) as copied, open(__file__) as source:
        assert copied.read() == source.read()
    assert os.listdir(os.path.join(path, "assets.extra")) == ["notes"]


def test_metric_names_follow_tf_supervised_output() -> None:
    with tf.Graph().as_default():
        pair = tf.compat.v1.metrics.mean(tf.constant([1.0]))
        names = ["acc", "metrics_x", ("a", "b")]
        tf_out = tf_bridge.runtime.spec._tf_export_output.EvalOutput(
            loss=tf.constant(1.0), metrics={n: pair for n in names}
        )
        expected = set(tf_out.metrics)
    ours = {key for n in names for key in convert.metric_output_keys(n)}
    assert ours == expected
    with pytest.raises(ValueError, match="reserved"):
        convert.check_metric_names(["global_step"])


def test_export_outputs_round_trip_jaxspec_tf() -> None:
    scores = np.array([[0.2, 0.8], [0.6, 0.4]], np.float32)
    heads = {
        "cls": jaxspec.export.ClassificationOutput(scores=scores, classes=["no", "yes"]),
        "ids": jaxspec.export.ClassificationOutput(classes=np.array([1, 0], np.int32)),
        "reg": jaxspec.export.RegressionOutput(np.array([1.5, 2.5], np.float32)),
        "all": jaxspec.export.PredictOutput({"p": scores}),
    }
    tf_heads = tf_bridge.export_outputs_to_tf(heads)
    assert isinstance(tf_heads["cls"], tf_bridge.ClassificationOutput)
    assert tf_heads["cls"].classes.numpy().tolist() == [[b"no", b"yes"]] * 2
    assert tf_heads["ids"].classes.numpy().tolist() == [b"1", b"0"]
    back = tf_bridge.export_outputs_from_tf({k: tf_heads[k] for k in ("cls", "reg", "all")})
    np.testing.assert_array_equal(back["cls"].scores, scores)
    assert list(back["cls"].class_vocabulary) == ["no", "yes"]
    np.testing.assert_array_equal(back["reg"].value, heads["reg"].value)
    np.testing.assert_array_equal(back["all"].outputs["p"], scores)
    varying = tf_bridge.ClassificationOutput(classes=tf.constant([["a"], ["b"]]))
    with pytest.raises(ValueError, match="classes"):
        tf_bridge.export_outputs_from_tf({"v": varying})
    with pytest.raises(TypeError, match="jaxspec"):
        tf_bridge.export_outputs_to_tf({"x": tf_heads["reg"]})


def test_tpu_estimator_contract(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    records: dict[str, list[Any]] = {"model_fn_params": [], "host_call": [], "input_fn_batch_size": []}
    fn = models.make_tpu_model_fn(tf_bridge, records)
    config = tf_bridge.RunConfig(model_dir=str(tmp_path / "tpu"))
    with pytest.raises(ValueError, match="config"):
        tf_bridge.TPUEstimator(fn, train_batch_size=4)
    with pytest.raises(ValueError, match="batch_size"):
        tf_bridge.TPUEstimator(fn, config=config, params={"batch_size": 4}, train_batch_size=4)
    with pytest.raises(ValueError, match="train_batch_size"):
        tf_bridge.TPUEstimator(fn, config=config)  # use_tpu=True (TF's default) needs it
    with pytest.raises(TypeError, match="train_batch_size"):
        tf_bridge.TPUEstimator(fn, config=config, train_batch_size=4.0)
    with caplog.at_level(logging.WARNING, logger="tf_bridge"):
        est = tf_bridge.TPUEstimator(fn, config=config, train_batch_size=4, predict_batch_size=3)
    assert "CPU path" in caplog.text
    with pytest.raises(ValueError, match="params"):
        est.train(lambda: models.train_input_fn(), steps=1)
    no_params = tf_bridge.TPUEstimator(
        lambda features, labels, mode: None,
        config=config.replace(model_dir=str(tmp_path / "np")),
        use_tpu=False,
    )
    with pytest.raises(ValueError, match="params"):
        no_params.train(models.train_input_fn, steps=1)
    est.train(models.train_input_fn, steps=1)
    path = est.export_saved_model(str(tmp_path / "export"), models.serving_input_receiver_fn(tf_bridge))
    assert records["model_fn_params"] == [
        ("train", 4, False),
        ("infer", None, False),
    ]  # export: no batch size
    assert tf.io.gfile.exists(os.path.join(path.decode(), "saved_model.pb"))


def test_in_memory_evaluator_matches_checkpoint_evaluation(tmp_path: Any) -> None:
    est = linear_est(tmp_path, save_summary_steps=2)
    hook = tb_hooks.InMemoryEvaluatorHook(est, models.eval_input_fn, every_n_iter=2, name="live")
    est.train(models.train_input_fn, steps=2, hooks=[hook])
    from_checkpoint = est.evaluate(models.eval_input_fn)
    assert {k: float(v) for k, v in hook.results.items()} == {k: float(v) for k, v in from_checkpoint.items()}
    assert sorted(tb_hooks.read_eval_metrics(est.eval_dir("live"))) == [0, 2]
    with pytest.raises(ValueError, match="every_n_iter"):
        tb_hooks.InMemoryEvaluatorHook(est, models.eval_input_fn, every_n_iter=0)
