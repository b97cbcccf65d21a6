"""tf_bridge's heads inside tf_bridge.Estimator's model_fn against TF 2.15's
tf.estimator.Estimator running the same model_fn with its own heads
(tests/data/tf215_heads.json, "estimator"): the training losses of 3 steps, evaluate()
(every key), predict() and the exported SavedModel's signature defs."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import tf_bridge
from tests.test_tf_heads import DATA, assert_close, build_head, key_of, plain, signature

v1 = tf.compat.v1
ModeKeys = tf_bridge.ModeKeys
RUNS = {c["name"]: c for c in DATA["estimator"]}


def head_model_fn(features: Any, labels: Any, mode: str, params: dict[str, Any]) -> Any:
    """logits = x @ w (w starts at w0), the head's spec; the reference tool's model_fn."""
    case = params["case"]
    head = build_head(case["head"])
    w = v1.get_variable("w", initializer=tf.constant(np.asarray(case["w0"], np.float32)))
    logits = tf.matmul(features["x"], w)
    if case["optimizer"] == "sgd":
        import tf_keras

        opt = tf_keras.optimizers.legacy.SGD(case["learning_rate"])
        opt.iterations = v1.train.get_or_create_global_step()
        spec = head.create_estimator_spec(
            features=features, mode=mode, logits=logits, labels=labels, optimizer=opt, trainable_variables=[w]
        )
    else:

        def train_op_fn(loss: tf.Tensor) -> Any:
            return v1.train.GradientDescentOptimizer(case["learning_rate"]).minimize(
                loss, global_step=v1.train.get_global_step()
            )

        spec = head.create_estimator_spec(
            features=features, mode=mode, logits=logits, labels=labels, train_op_fn=train_op_fn
        )
    if mode == ModeKeys.TRAIN:
        v1.add_to_collection("heads_loss", spec.loss)
    return spec


def input_fn_of(case: dict[str, Any], repeat: bool) -> Any:
    def input_fn() -> tf.data.Dataset:
        feats = {"x": np.asarray(case["x"], np.float32)}
        feats.update({k: np.asarray(v, np.float32) for k, v in case["features"].items()})
        labels = case["labels"]
        labels = (
            {k: np.asarray(v) for k, v in labels.items()} if isinstance(labels, dict) else np.asarray(labels)
        )
        ds = tf.data.Dataset.from_tensor_slices((feats, labels))
        return (ds.repeat() if repeat else ds).batch(case["batch_size"])

    return input_fn


class LossHook(v1.train.SessionRunHook):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(v1.get_collection("heads_loss")[0])

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.losses.append(float(run_values.results))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_head_in_estimator_matches_tf215(name: str, tmp_path: Any) -> None:
    case = RUNS[name]
    est = tf_bridge.Estimator(head_model_fn, str(tmp_path / "model"), params={"case": case})
    hook = LossHook()
    est.train(input_fn_of(case, True), steps=case["train_steps"], hooks=[hook])
    np.testing.assert_allclose(hook.losses, case["train_losses"], atol=1e-5)

    got_eval = est.evaluate(input_fn_of(case, False))
    assert sorted(got_eval) == sorted(case["evaluate"])
    for key, want in case["evaluate"].items():
        assert float(got_eval[key]) == pytest.approx(want, abs=1e-5), key

    got_preds = list(est.predict(input_fn_of(case, False)))
    assert len(got_preds) == len(case["predictions"])
    for got, want in zip(got_preds, case["predictions"], strict=True):
        got = {key_of(k): plain(v) for k, v in got.items()}
        assert sorted(got) == sorted(want)
        for key in want:
            assert_close(got[key], want[key], key)

    receiver_fn = tf_bridge.build_parsing_serving_input_receiver_fn(
        {"x": tf.io.FixedLenFeature([3], tf.float32)}
    )
    export_dir = est.export_saved_model(str(tmp_path / "export"), receiver_fn)
    saved = saved_model_pb2.SavedModel()
    with open(
        os.path.join(export_dir, b"saved_model.pb" if isinstance(export_dir, bytes) else "saved_model.pb"),
        "rb",
    ) as f:
        saved.ParseFromString(f.read())
    sigs = saved.meta_graphs[0].signature_def
    assert {k: signature(sigs[k]) for k in sorted(sigs)} == case["signature_defs"]
    _check_serving(export_dir, case)


def _check_serving(export_dir: Any, case: dict[str, Any]) -> None:
    """The SavedModel's predict signature, served tf.Examples of x, gives TF 2.15's predictions."""
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=row))}
            )
        ).SerializeToString()
        for row in case["x"]
    ]
    loaded = tf.saved_model.load(export_dir.decode() if isinstance(export_dir, bytes) else export_dir)
    outputs = loaded.signatures["predict"](examples=tf.constant(examples))
    for key, value in outputs.items():
        want = [p[key] for p in case["predictions"]]
        assert_close(plain(value.numpy()), want, f"serving predict {key}")


def test_migration_guide_heads_example(tmp_path: Any) -> None:
    """docs/migration.md's heads model_fn trains and evaluates under tf_bridge.Estimator;
    evaluate()'s average_loss and accuracy equal numpy's from the checkpoint's variables."""
    from tests.test_tf_runner_migration import guide_block

    model_fn = guide_block("tf-heads")["heads_model_fn"]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 4)).astype(np.float32)
    w = rng.uniform(0.5, 2.0, size=(10, 1)).astype(np.float32)
    y = np.array([["a"], ["b"], ["c"], ["a"], ["c"], ["b"], ["b"], ["a"], ["c"], ["a"]])

    def input_fn() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(({"x": x, "w": w}, y)).batch(5)

    est = tf_bridge.Estimator(model_fn, str(tmp_path / "model"))
    est.train(input_fn, steps=2)
    result = est.evaluate(input_fn)
    assert sorted(result) == ["accuracy", "average_loss", "global_step", "loss"]
    kernel, bias = est.get_variable_value("kernel"), est.get_variable_value("bias")
    logits = x @ kernel + bias
    log_p = logits - logits.max(1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(1, keepdims=True))
    ids = np.array([["a", "b", "c"].index(v) for v in y[:, 0]])
    xent = -log_p[np.arange(10), ids]
    assert result["average_loss"] == pytest.approx(np.sum(xent * w[:, 0]) / np.sum(w), rel=1e-5)
    assert result["accuracy"] == pytest.approx(
        np.sum((logits.argmax(1) == ids) * w[:, 0]) / np.sum(w), rel=1e-5
    )
    # loss: the mean over the two batches of each batch's SUM_OVER_BATCH_SIZE loss
    batch_losses = [np.mean(xent[i : i + 5] * w[i : i + 5, 0]) for i in (0, 5)]
    assert result["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-5)
    assert result["global_step"] == 2


@pytest.mark.parametrize("name", ["multiclass", "binary_vocab_weights_thresholds"])
def test_tpu_estimator_spec_in_tpu_estimator_matches_tf215(name: str, tmp_path: Any) -> None:
    """A TPUEstimator model_fn returning ``head._create_tpu_estimator_spec(...)`` (CPU path)
    trains and evaluates as TF 2.15's Estimator did with the head's EstimatorSpec."""
    case = RUNS[name]

    def model_fn(features: Any, labels: Any, mode: str, params: dict[str, Any]) -> Any:
        head = build_head(case["head"])
        w = v1.get_variable("w", initializer=tf.constant(np.asarray(case["w0"], np.float32)))

        def train_op_fn(loss: tf.Tensor) -> Any:
            opt = v1.train.GradientDescentOptimizer(case["learning_rate"])
            return opt.minimize(loss, global_step=v1.train.get_global_step())

        return head._create_tpu_estimator_spec(
            features=features,
            mode=mode,
            logits=tf.matmul(features["x"], w),
            labels=labels,
            train_op_fn=train_op_fn,
        )

    def input_fn(repeat: bool) -> Any:
        return lambda params: input_fn_of(case, repeat)()

    config = tf_bridge.RunConfig(model_dir=str(tmp_path / "model"), tpu_config=tf_bridge.TPUConfig())
    est = tf_bridge.TPUEstimator(
        model_fn,
        config=config,
        use_tpu=False,
        train_batch_size=case["batch_size"],
        eval_batch_size=case["batch_size"],
    )
    est.train(input_fn(True), steps=case["train_steps"])
    got = est.evaluate(input_fn(False))
    assert sorted(got) == sorted(case["evaluate"])
    for key, want in case["evaluate"].items():
        assert float(got[key]) == pytest.approx(want, abs=1e-5), key
