"""Model parallelism end to end: one replica of a wide MLP split over 2 devices.

Trains a flax MLP (64 -> 512 -> 512 -> 10) on scikit-learn's digits with
``jaxspec.TPUEstimator`` and ``TPUConfig(num_cores_per_replica=2)``: 8 virtual CPU
devices form a 4x2 ``('replica', 'core')`` mesh; ``partition_rules`` split the two wide
kernels (and their adam slots) Megatron-style over the 2 cores of each replica, and
``jaxspec.with_sharding_constraint`` lays the hidden activations out the same way. Then it
evaluates, resumes training from the 4x2 checkpoint on 8 replicas of one device and on one
device (``jaxspec.Estimator``), and exports a SavedModel of the gathered state that plain
TensorFlow serves with the predictions of the mesh.

Run: ``python examples/model_parallel.py [--model_dir DIR] [--steps N]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import importlib
import logging
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import PartitionSpec as P

import jaxspec

try:  # run as a script (examples/ on sys.path) or imported as examples.<name>
    from _runs import fresh_run_dir
except ImportError:
    from examples._runs import fresh_run_dir

WIDTH = 512
BATCH = 128
#: Layer 0 splits its columns over the cores, layer 1 its rows (one all-reduce per layer
#: pair inside a replica); the 10-way output layer is small and replicated.
PARTITION_RULES = [
    (r"Dense_0/kernel", P(None, "core")),
    (r"Dense_0/bias", P("core")),
    (r"Dense_1/kernel", P("core", None)),
]


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits split 80/20: ``x_train, x_test, y_train, y_test`` (x float32 [n, 64] in
    [0, 1], y int32 [n])."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, x_test, y_train, y_test


class WideMLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.relu(nn.Dense(WIDTH)(x))
        h = jaxspec.with_sharding_constraint(h, P(None, "core"))  # [batch, 512] over the cores
        h = nn.relu(nn.Dense(WIDTH)(h))
        return nn.Dense(10)(h)


def init_fn(features: dict[str, np.ndarray]) -> train_state.TrainState:
    """Compiled by jaxspec with the rules' output shardings: born sharded."""
    model = WideMLP()
    params = model.init(jax.random.PRNGKey(0), jnp.asarray(features["x"][:1]))
    tx = jaxspec.CrossShardOptimizer(optax.adam(1e-3))
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def model_fn(features, labels, mode, params, state):
    logits = state.apply_fn(state.params, features["x"])
    if mode == jaxspec.ModeKeys.PREDICT:
        return jaxspec.TPUEstimatorSpec(mode, predictions={"probabilities": jax.nn.softmax(logits)})

    def loss_of(p):
        return optax.softmax_cross_entropy_with_integer_labels(
            state.apply_fn(p, features["x"]), labels
        ).mean()

    if mode == jaxspec.ModeKeys.TRAIN:
        loss, grads = jax.value_and_grad(loss_of)(state.params)
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))

    def metric_fn(labels, logits):
        return {"accuracy": jaxspec.metrics.accuracy(labels, jnp.argmax(logits, axis=-1))}

    return jaxspec.TPUEstimatorSpec(
        mode, loss=loss_of(state.params), eval_metrics=(metric_fn, [labels, logits])
    )


def input_fn_of(x: np.ndarray, y: np.ndarray | None, training: bool) -> Any:
    def input_fn(params):
        b = params.get("batch_size", BATCH)
        if y is None:
            return ({"x": x[s : s + b]} for s in range(0, len(x), b))
        if not training:
            return (({"x": x[s : s + b]}, y[s : s + b]) for s in range(0, len(x), b))

        def repeat():
            while True:
                for s in range(0, len(x) - b + 1, b):
                    yield {"x": x[s : s + b]}, y[s : s + b]

        return repeat()

    return input_fn


def make_estimator(model_dir: str, cores: int | None) -> jaxspec.TPUEstimator:
    """A TPUEstimator over every device; ``cores`` devices per replica."""
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        log_step_count_steps=50,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=50, num_cores_per_replica=cores),
    )
    return jaxspec.TPUEstimator(
        model_fn,
        config=config,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        predict_batch_size=BATCH,
        init_fn=init_fn,
        partition_rules=PARTITION_RULES,
    )


def main(model_dir: str | None = None, steps: int = 200) -> dict[str, Any]:
    model_dir = model_dir or fresh_run_dir("model_parallel")
    x_train, x_test, y_train, y_test = load_data()
    train = input_fn_of(x_train, y_train, training=True)
    evaluate = input_fn_of(x_test, y_test, training=False)

    split = make_estimator(model_dir, cores=2)
    print("mesh:", dict(split._mesh().shape))
    split.train(train, steps=steps)
    metrics = {"4x2": split.evaluate(evaluate)}
    kernel = split.get_variable_value("params/params/Dense_0/kernel")  # gathered to the host
    print(f"4x2 after {steps} steps: {metrics['4x2']}; Dense_0/kernel {kernel.shape}")

    wide = make_estimator(model_dir, cores=None)  # the same checkpoint on 8 replicas x 1 core
    metrics["8x1"] = wide.evaluate(evaluate)
    wide.train(train, steps=steps // 2)
    one = jaxspec.Estimator(  # and on one device
        lambda features, labels, mode, state: model_fn(features, labels, mode, {}, state).as_estimator_spec(),
        config=jaxspec.RunConfig(model_dir=model_dir, save_checkpoints_steps=None, log_step_count_steps=50),
        init_fn=init_fn,
    )
    one.train(train, steps=steps // 2)
    metrics["one device"] = one.evaluate(evaluate)
    for name, m in metrics.items():
        print(
            f"{name:>10}: accuracy {m['accuracy']:.4f}, loss {m['loss']:.4f}, global_step {m['global_step']}"
        )

    x = x_test[:45]  # not a multiple of the batch: padded and masked on the mesh
    predictions = np.stack([p["probabilities"] for p in split.predict(input_fn_of(x, None, training=False))])
    result: dict[str, Any] = {"metrics": metrics, "model_dir": model_dir}
    try:
        import tf_bridge  # before TensorFlow: tf_bridge imports it without its C++ start-up lines

        tf = importlib.import_module("tensorflow")
    except ImportError:
        print("TensorFlow is not installed: no export.")
        return result
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
    export_dir = split.export_saved_model(os.path.join(model_dir, "export"), receiver).decode()
    served = tf.saved_model.load(export_dir).signatures["serving_default"](x=tf.constant(x))
    gap = float(np.abs(served["probabilities"].numpy() - predictions).max())
    print(f"SavedModel {export_dir}: TensorFlow serves the mesh's predictions (largest gap {gap:.2e}).")
    result.update(export_dir=export_dir, serving_gap=gap)
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model_dir", default=None)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    main(args.model_dir, args.steps)
