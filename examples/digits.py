"""Digits end to end: a TPUEstimatorSpec model_fn on a device mesh, on real data.

Trains a flax MLP on scikit-learn's handwritten digits (1,797 8x8 images, shipped in the
package) with ``jaxspec.TPUEstimator(use_tpu=True)`` across every device (8 virtual CPU
devices here), evaluates on the 360 held-out images (the last batch is padded and
masked), predicts them, exports a SavedModel through ``tf_bridge`` (with TF Serving warmup
records and the export's validation report, printed in one line), serves it with plain
TensorFlow and checks it agrees with jaxspec, then resumes from the checkpoint.

Run: ``python examples/digits.py [--model_dir DIR] [--max_steps N]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import importlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import jaxspec
from jaxspec.export import ClassificationOutput, PredictOutput

try:  # run as a script (examples/ on sys.path) or imported as examples.<name>
    from _runs import fresh_run_dir
except ImportError:
    from examples._runs import fresh_run_dir

NUM_CLASSES = 10
CLASS_NAMES = [str(i) for i in range(NUM_CLASSES)]
LEARNING_RATE = optax.cosine_decay_schedule(init_value=1e-2, decay_steps=600, alpha=0.1)


def load_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits split 80/20 with a fixed seed: x float32 [n, 64] in [0, 1], y int32 [n]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test


class MLP(nn.Module):
    """Two hidden layers of 128 and 64 units; logits [batch, 10]."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(128)(x))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(NUM_CLASSES)(x)


def init_fn(rng: jax.Array, features: dict[str, np.ndarray]) -> train_state.TrainState:
    """The first state: MLP parameters and Adam's slots, gradients averaged over replicas."""
    model = MLP()
    params = model.init(rng, jnp.asarray(features["x"][:1]))
    tx = jaxspec.CrossShardOptimizer(optax.adam(LEARNING_RATE))
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def make_host_fn(model_dir: str) -> Any:
    """A host_fn that writes TensorBoard scalars for every step (runs on the host)."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(os.path.join(model_dir, "host_call"))

    def host_fn(global_step: np.ndarray, loss: np.ndarray, learning_rate: np.ndarray) -> None:
        step = int(global_step[0])  # one value per replica, all equal
        writer.add_scalar("host_call/loss", float(loss.mean()), step)
        writer.add_scalar("host_call/learning_rate", float(learning_rate[0]), step)
        writer.flush()

    return host_fn


def make_model_fn(host_fn: Any) -> Any:
    """The model_fn: a TPUEstimatorSpec per mode, as a TPUEstimator user writes it."""

    def model_fn(features, labels, mode, params, state, global_step):
        def loss_of(p):
            logits = state.apply_fn(p, features["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits

        if mode == jaxspec.ModeKeys.TRAIN:
            (loss, _), grads = jax.value_and_grad(loss_of, has_aux=True)(state.params)
            learning_rate = LEARNING_RATE(global_step)
            return jaxspec.TPUEstimatorSpec(
                mode,
                loss=loss,
                train_op=state.apply_gradients(grads=grads),
                host_call=(host_fn, [global_step[None], loss[None], learning_rate[None]]),
            )
        logits = state.apply_fn(state.params, features["x"])
        if mode == jaxspec.ModeKeys.EVAL:
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

            def metric_fn(labels, logits):
                return {
                    "accuracy": jaxspec.metrics.accuracy(labels, jnp.argmax(logits, axis=-1)),
                    "mean_max_probability": jaxspec.metrics.mean(jnp.max(jax.nn.softmax(logits), axis=-1)),
                }

            return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
        probabilities = jax.nn.softmax(logits)
        class_ids = jnp.argmax(logits, axis=-1)
        return jaxspec.TPUEstimatorSpec(
            mode,
            predictions={"class_ids": class_ids, "probabilities": probabilities},
            export_outputs={
                "serving_default": PredictOutput({"class_ids": class_ids, "probabilities": probabilities}),
                "classification": ClassificationOutput(scores=probabilities, classes=CLASS_NAMES),
            },
        )

    return model_fn


def make_input_fn(x: np.ndarray, y: np.ndarray, training: bool) -> Any:
    """input_fn over numpy arrays; ``params['batch_size']`` is the per-host batch."""

    def input_fn(params):
        batch = params["batch_size"]
        if not training:
            return (({"x": x[s : s + batch]}, y[s : s + batch]) for s in range(0, len(x), batch))

        def repeat():
            order = np.random.RandomState(1)
            while True:
                idx = order.permutation(len(x))
                for s in range(0, len(idx) - batch + 1, batch):
                    yield {"x": x[idx[s : s + batch]]}, y[idx[s : s + batch]]

        return repeat()

    return input_fn


def make_estimator(model_dir: str) -> jaxspec.TPUEstimator:
    """TPUEstimator over every device, 50 steps per on-device loop."""
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        tf_random_seed=0,
        save_checkpoints_steps=200,
        log_step_count_steps=100,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=50),
    )
    return jaxspec.TPUEstimator(
        model_fn=make_model_fn(make_host_fn(model_dir)),
        config=config,
        params={},  # model_fn takes params (TPUEstimator's batch_size); none of our own
        use_tpu=True,
        train_batch_size=128,
        eval_batch_size=128,
        predict_batch_size=128,
        init_fn=init_fn,
    )


def serve_and_compare(export_dir: str, x: np.ndarray, predictions: list[dict[str, Any]]) -> float:
    """Load the SavedModel in TensorFlow, run both signatures on serialized tf.Examples
    and return the largest difference from jaxspec's predictions.

    Raises:
      AssertionError: classes or class ids differ.
    """
    import tf_bridge  # noqa: F401 - before TensorFlow (imported quietly)

    tf = importlib.import_module("tensorflow")

    serialized = tf.constant(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=row))}
                )
            ).SerializeToString()
            for row in x
        ]
    )
    loaded = tf.saved_model.load(export_dir)
    served = loaded.signatures["serving_default"](examples=serialized)
    classified = loaded.signatures["classification"](inputs=serialized)
    probs = np.stack([p["probabilities"] for p in predictions])
    ids = np.array([p["class_ids"] for p in predictions])
    assert (served["class_ids"].numpy() == ids).all(), "serving_default class_ids differ"
    top = np.take_along_axis(classified["classes"].numpy(), ids[:, None], axis=1)[:, 0]
    assert [c.decode() for c in top] == [CLASS_NAMES[i] for i in ids], "classification classes differ"
    return float(
        max(
            np.abs(served["probabilities"].numpy() - probs).max(),
            np.abs(classified["scores"].numpy() - probs).max(),
        )
    )


def read_serving_assets(export_dir: str) -> tuple[str, int]:
    """The export's validation report in one line, and how many warmup records it holds
    (``assets.extra/``: see docs/serving.md)."""
    import json

    from tf_bridge.export import validation, warmup

    tf = importlib.import_module("tensorflow")
    extra = os.path.join(export_dir, "assets.extra")
    with open(os.path.join(extra, validation.REPORT_FILE)) as f:
        report = json.load(f)
    records = sum(1 for _ in tf.data.TFRecordDataset(os.path.join(extra, warmup.WARMUP_FILE)))
    return validation.summary(report), records


def main(model_dir: str | None = None, max_steps: int = 600) -> dict[str, Any]:
    """Run the whole example; return the summary it prints."""
    import tf_bridge  # before TensorFlow: tf_bridge imports it without its C++ start-up lines

    tf = importlib.import_module("tensorflow")
    model_dir = model_dir or fresh_run_dir("digits")
    x_train, y_train, x_test, y_test = load_data()
    print(
        f"digits: {len(x_train)} training and {len(x_test)} held-out images, "
        f"{len(jax.devices())} devices, model_dir={model_dir}"
    )

    est = make_estimator(model_dir)
    est.train(make_input_fn(x_train, y_train, training=True), max_steps=max_steps)
    metrics = est.evaluate(make_input_fn(x_test, y_test, training=False))
    predictions = list(
        est.predict(
            lambda params: (
                {"x": x_test[s : s + params["batch_size"]]}
                for s in range(0, len(x_test), params["batch_size"])
            )
        )
    )
    predict_accuracy = float(np.mean([p["class_ids"] for p in predictions] == y_test))

    feature_spec = {"x": tf.io.FixedLenFeature([64], tf.float32)}
    # Eight held-out rows become TF Serving's warmup requests (per signature) and the rows
    # the export validates TF's answers against JAX's on (assets.extra/jaxspec_validation.json).
    export_dir = est.export_saved_model(
        os.path.join(model_dir, "export"),
        tf_bridge.build_parsing_serving_input_receiver_fn(feature_spec),
        warmup_requests=[{"x": row} for row in x_test[:8]],
    )
    max_diff = serve_and_compare(export_dir.decode(), x_test, predictions)
    validation, warmup_records = read_serving_assets(export_dir.decode())
    print(validation)

    again = make_estimator(model_dir)
    again.train(make_input_fn(x_train, y_train, training=True), max_steps=max_steps)
    resumed_step = int(os.path.basename(again.latest_checkpoint()))

    summary = {
        "global_step": metrics["global_step"],
        "eval_accuracy": metrics["accuracy"],
        "eval_loss": metrics["loss"],
        "predictions": len(predictions),
        "predict_accuracy": predict_accuracy,
        "export_dir": export_dir.decode(),
        "serving_max_abs_diff": max_diff,
        "warmup_records": warmup_records,
        "validation": validation,
        "resumed_at_step": resumed_step,
    }
    print("\n== summary ==")
    for key, value in summary.items():
        print(f"{key:>22}: {value}")
    assert metrics["accuracy"] >= 0.95, "accuracy below 0.95"
    assert len(predictions) == len(x_test), "predict lost or duplicated examples"
    assert max_diff <= 1e-5, "SavedModel disagrees with jaxspec"
    assert validation.startswith("export validation passed"), "export validation failed"
    assert warmup_records == 16, "expected 8 warmup records per serving signature"
    assert resumed_step == max_steps, "second run retrained instead of resuming"
    print("all checks passed")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default=None, help="defaults to runs/digits, emptied first")
    parser.add_argument("--max_steps", type=int, default=600)
    args = parser.parse_args()
    main(args.model_dir, args.max_steps)
