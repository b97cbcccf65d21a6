"""behaviour-cases.md, sections TPU and TEV: TPUEstimator's construction, batch-size and
model_fn/spec rules, on the 8 virtual CPU devices of conftest.py. Errors raised while
model_fn is traced need no compilation; a few cases train or evaluate a one-weight model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, TPUEstimatorSpec

X = np.arange(16, dtype=np.float32).reshape(16, 1) / 16
Y = 2 * X


def init_fn():
    return {"w": jnp.zeros((), jnp.float32)}


def _loss_and_step(features, labels, w):
    def loss_of(v):
        return jnp.mean((features["x"] * v - labels) ** 2)

    loss, grad = jax.value_and_grad(loss_of)(w)
    return loss, {"w": w - 0.1 * grad}


def tpu_model_fn(features, labels, mode, params, state):
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"y": features["x"][:, 0] * state["w"]})
    loss, new_state = _loss_and_step(features, labels, state["w"])
    if mode == ModeKeys.TRAIN:
        return TPUEstimatorSpec(mode, loss=loss, train_op=new_state)

    def metric_fn(labels, predictions):
        return {
            "mean_label": jaxspec.metrics.mean(labels),
            "mean_prediction": jaxspec.metrics.mean(predictions),
        }

    return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, features["x"] * state["w"]]))


def config(tmp_path, **tpu):
    return jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(**tpu),
    )


def recording_input_fn(calls, with_labels=True):
    def input_fn(params):
        calls.append(params["batch_size"])
        rows = params["batch_size"]
        features = {"x": np.resize(X, (rows, 1))}
        return (features, np.resize(Y, (rows, 1))) if with_labels else features

    return input_fn


def tpu(tmp_path, model_fn=tpu_model_fn, tpu_config=None, **kwargs):
    kwargs.setdefault("train_batch_size", 16)
    return jaxspec.TPUEstimator(
        model_fn, config=config(tmp_path, **(tpu_config or {})), init_fn=init_fn, **kwargs
    )


# -- constructor and batch-size rules ----------------------------------------------------


def test_tpu_01_reserved_params_and_missing_train_batch_size(tmp_path):
    for key in ("batch_size", "context"):
        with pytest.raises(ValueError, match=key):
            tpu(tmp_path, params={key: 8})
    with pytest.raises(ValueError, match="train_batch_size must be set"):
        jaxspec.TPUEstimator(tpu_model_fn, config=config(tmp_path), params={})


def test_tpu_01_config_is_required(tmp_path):
    with pytest.raises(ValueError, match="config"):
        jaxspec.TPUEstimator(tpu_model_fn, model_dir=str(tmp_path), train_batch_size=16)


def test_tpu_02_float_train_batch_size(tmp_path):
    with pytest.raises(TypeError, match="train_batch_size must be an int, got float"):
        tpu(tmp_path, train_batch_size=1.0)
    with pytest.raises(ValueError, match="eval_batch_size must be positive"):
        tpu(tmp_path, eval_batch_size=0)


def test_tpu_04_per_host_input_gets_the_host_batch(tmp_path):
    calls = []
    est = tpu(tmp_path, train_batch_size=128)
    assert calls == []
    est.train(recording_input_fn(calls), steps=1)
    assert calls == [128]


def test_tpu_05_train_batch_not_divisible_by_shards(tmp_path):
    est = tpu(tmp_path, train_batch_size=127)
    with pytest.raises(ValueError, match=r"train_batch_size \(127\) must be divisible .*\(8\)"):
        est.train(recording_input_fn([]), steps=1)


def test_tpu_07_eval_and_predict_batch_not_divisible(tmp_path):
    est = tpu(tmp_path, eval_batch_size=127, predict_batch_size=127)
    with pytest.raises(ValueError, match=r"eval_batch_size \(127\) must be divisible"):
        est.evaluate(recording_input_fn([]), steps=1)
    predictions = est.predict(recording_input_fn([], with_labels=False))
    with pytest.raises(ValueError, match=r"predict_batch_size \(127\) must be divisible"):
        next(predictions)


def test_tpu_08_more_shards_than_devices(tmp_path):
    est = tpu(tmp_path, tpu_config={"num_shards": 16})
    with pytest.raises(ValueError, match="num_shards=16"):
        est.train(recording_input_fn([]), steps=1)


def test_per_host_v2_input_gets_the_replica_batch(tmp_path):
    calls = []
    est = tpu(tmp_path, tpu_config={"per_host_input_for_training": jaxspec.InputPipelineConfig.PER_HOST_V2})
    est.train(recording_input_fn(calls), steps=1)
    assert calls == [2]  # 16 examples over 8 replicas; the host reads one batch per replica


# -- model_fn signature and spec handling ------------------------------------------------


def test_tpu_22_labels_inside_features(tmp_path):
    def model_fn(features, mode, params, state):
        loss, new_state = _loss_and_step(features, features["y"], state["w"])
        return TPUEstimatorSpec(mode, loss=loss, train_op=new_state)

    def input_fn(params):
        return {"x": X, "y": Y}

    est = tpu(tmp_path, model_fn)
    est.train(input_fn, steps=1)
    assert est.latest_checkpoint().endswith("1")


def test_tpu_23_labels_returned_but_not_accepted(tmp_path):
    def model_fn(features, mode, params, state):
        return tpu_model_fn(features, None, mode, params, state)

    with pytest.raises(ValueError, match="input_fn returned labels.*'labels'"):
        tpu(tmp_path, model_fn).train(recording_input_fn([]), steps=1)


def test_tpu_24_model_fn_without_params(tmp_path):
    def model_fn(features, labels, mode, state):
        return tpu_model_fn(features, labels, mode, {}, state)

    est = tpu(tmp_path, model_fn)
    with pytest.raises(ValueError, match="model_fn must take a 'params' argument"):
        est.train(recording_input_fn([]), steps=1)


def test_tpu_25_unexpected_model_fn_argument(tmp_path):
    def model_fn(features, labels, invalid_arg):
        return None

    with pytest.raises(ValueError, match="invalid_arg"):
        tpu(tmp_path, model_fn)


def test_tpu_27_training_chief_hooks_on_the_mesh(tmp_path):
    def model_fn(features, labels, mode, params, state):
        loss, new_state = _loss_and_step(features, labels, state["w"])
        return EstimatorSpec(
            mode, loss=loss, train_op=new_state, training_chief_hooks=[jaxspec.SessionRunHook()]
        )

    with pytest.raises(ValueError, match="training_chief_hooks"):
        tpu(tmp_path, model_fn).train(recording_input_fn([]), steps=1)


def test_tpu_predictions_must_be_a_dict_on_the_mesh(tmp_path):
    def model_fn(features, labels, mode, params, state):
        return TPUEstimatorSpec(mode, predictions=features["x"][:, 0] * state["w"])

    est = tpu(tmp_path, model_fn, predict_batch_size=16)
    with pytest.raises(TypeError, match="predictions must be a dict"):
        next(est.predict(recording_input_fn([], with_labels=False)))


# -- evaluation --------------------------------------------------------------------------


def test_tev_01_eval_spec_without_metrics(tmp_path):
    def model_fn(features, labels, mode, params, state):
        loss, new_state = _loss_and_step(features, labels, state["w"])
        return TPUEstimatorSpec(
            mode, loss=loss, train_op=new_state if mode == ModeKeys.TRAIN else None, eval_metrics=None
        )

    est = tpu(tmp_path, model_fn, eval_batch_size=16)
    est.train(recording_input_fn([]), steps=1)
    result = est.evaluate(recording_input_fn([]), steps=1)
    assert set(result) == {"loss", "global_step"} and result["global_step"] == 1


@pytest.mark.parametrize("use_tpu", [True, False])
@pytest.mark.parametrize("as_dict", [False, True], ids=["tev_03_list", "tev_04_dict"])
def test_tev_03_04_eval_metrics_tensors_as_list_or_dict(tmp_path, use_tpu, as_dict):
    def model_fn(features, labels, mode, params, state):
        loss, _ = _loss_and_step(features, labels, state["w"])

        def metric_fn(labels, predictions):
            return {"mean_label": jaxspec.metrics.mean(labels), "mean_x": jaxspec.metrics.mean(predictions)}

        tensors = [labels, features["x"]]
        if as_dict:
            tensors = {"predictions": features["x"], "labels": labels}
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))

    est = tpu(tmp_path, model_fn, use_tpu=use_tpu, eval_batch_size=16)
    result = est.evaluate(recording_input_fn([]), steps=1)
    assert result["mean_label"] == pytest.approx(float(Y.mean())) and result["mean_x"] == pytest.approx(
        float(X.mean())
    )
    assert result["loss"] == pytest.approx(float(np.mean(Y**2)))  # w starts at 0


def test_tev_08_plain_estimator_spec_in_eval_on_the_mesh(tmp_path):
    def model_fn(features, labels, mode, params, state):
        loss, new_state = _loss_and_step(features, labels, state["w"])
        return EstimatorSpec(mode, loss=loss, train_op=new_state)

    est = tpu(tmp_path, model_fn, eval_batch_size=16)
    with pytest.raises(RuntimeError, match="evaluation on the mesh .*TPUEstimatorSpec.*EstimatorSpec"):
        est.evaluate(recording_input_fn([]), steps=1)


@pytest.mark.parametrize("use_tpu", [True, False])
def test_host_call_tensors_need_rank_one_on_the_mesh(tmp_path, use_tpu):
    seen = []

    def model_fn(features, labels, mode, params, state):
        loss, new_state = _loss_and_step(features, labels, state["w"])
        return TPUEstimatorSpec(mode, loss=loss, train_op=new_state, host_call=(seen.append, [loss]))

    est = tpu(tmp_path, model_fn, use_tpu=use_tpu)
    if use_tpu:
        with pytest.raises(ValueError, match="host_call tensor 0 has rank 0"):
            est.train(recording_input_fn([]), steps=1)
    else:
        est.train(recording_input_fn([]), steps=2)
        assert [np.shape(v) for v in seen] == [(), ()]
