"""flax.nnx's mode switch inside model_fn: a module without a train flag, switched by
``model.train()`` / ``model.eval()`` as flax's nnx examples do, trains, evaluates and
predicts on one device and on the 8-device mesh, and exports; every number equals the
module's own ``nnx.jit`` evaluation (BatchNorm's running averages, Dropout off)."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import batches_input_fn, digits, fast_config

import jaxspec
from jaxspec.export import PredictOutput

X, Y = digits(160)
X_EVAL, Y_EVAL = X[112:160], Y[112:160]  # 3 batches of 16
X_PRED = X[112:152]  # 40 rows: the last batch of 16 is padded


class _BatchNormDropout(nnx.Module):
    """64 -> 32 -> BatchNorm -> relu -> Dropout(0.5) -> 10; no train argument."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(64, 32, rngs=rngs)
        self.norm = nnx.BatchNorm(32, momentum=0.5, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.drop(nnx.relu(self.norm(self.hidden(x)))))


def _init_fn():
    model = _BatchNormDropout(nnx.Rngs(0))
    return {"model": model, "opt": nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)}


def _metric_fn(labels, logits):
    return {"accuracy": jaxspec.metrics.accuracy(labels, logits.argmax(-1))}


def _model_fn(features, labels, mode, params, state):
    model, opt = state["model"], state["opt"]
    x = features["x"]
    if mode == jaxspec.ModeKeys.TRAIN:
        model.train()

        def loss_of(m):
            return optax.softmax_cross_entropy_with_integer_labels(m(x), labels).mean()

        loss, grads = nnx.value_and_grad(loss_of)(model)
        opt.update(model, grads)
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op={"model": model, "opt": opt})
    model.eval()  # the nnx examples' switch: BatchNorm's running averages, Dropout off
    logits = model(x)
    if mode == jaxspec.ModeKeys.PREDICT:
        return jaxspec.TPUEstimatorSpec(
            mode,
            predictions={"logits": logits},
            export_outputs={"serving_default": PredictOutput({"logits": logits})},
        )
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_metric_fn, [labels, logits]))


@nnx.jit
def _nnx_logits(model: _BatchNormDropout, x: jax.Array) -> jax.Array:
    model.eval()
    return model(x)


def _estimator(model_dir: str, use_tpu: bool) -> jaxspec.TPUEstimator:
    return jaxspec.TPUEstimator(
        _model_fn,
        config=fast_config(model_dir, iterations_per_loop=2),
        params={},
        use_tpu=use_tpu,
        train_batch_size=16,
        eval_batch_size=16,
        predict_batch_size=16,
        init_fn=_init_fn,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model_dir, the trained module, its eval-mode logits of X_EVAL by nnx.jit)."""
    model_dir = str(tmp_path_factory.mktemp("nnx_modes"))
    est = _estimator(model_dir, use_tpu=False)
    est.train(batches_input_fn(X[:112], Y[:112], 16, repeat=True), steps=6)
    model = est._compile_cache.live.state["model"]
    # Training moved the running averages away from their start: eval mode is visible.
    assert np.abs(np.asarray(model.norm.mean[...])).max() > 1e-2
    return model_dir, model, np.asarray(_nnx_logits(model, X_EVAL))


@pytest.mark.parametrize("use_tpu", [False, True], ids=["one_device", "mesh8"])
def test_eval_and_predict_switch_modes_as_nnx_jit(trained, tmp_path, use_tpu):
    model_dir, model, logits = trained
    est = _estimator(model_dir, use_tpu)
    got = est.evaluate(batches_input_fn(X_EVAL, Y_EVAL, 16))
    per_row = np.asarray(optax.softmax_cross_entropy_with_integer_labels(logits, Y_EVAL))
    assert got["global_step"] == 6
    np.testing.assert_allclose(got["loss"], per_row.mean(), rtol=1e-5)
    assert got["accuracy"] == pytest.approx(float(np.mean(logits.argmax(-1) == Y_EVAL)), abs=1e-7)
    preds = np.stack([p["logits"] for p in est.predict(batches_input_fn(X_PRED, None, 16))])
    np.testing.assert_allclose(preds, logits[:40], rtol=1e-5, atol=1e-6)


def test_export_serves_the_eval_mode(trained, tmp_path):
    tf = pytest.importorskip("tensorflow")
    import tf_bridge

    model_dir, model, logits = trained
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": np.zeros((1, 64), np.float32)})
    path = _estimator(model_dir, use_tpu=False).export_saved_model(str(tmp_path), receiver).decode()
    served = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(X_EVAL))["logits"]
    np.testing.assert_allclose(served.numpy(), logits, rtol=1e-5, atol=1e-6)
