"""flax.nnx end to end: an ``nnx.Module`` with Dropout and an ``nnx.Optimizer`` as the
Estimator's state, trained, evaluated, predicted and exported as a SavedModel.

The state is ``{'model': module, 'optimizer': nnx.Optimizer}``: nnx modules are pytrees,
so jaxspec carries, checkpoints and restores them like any other state. The Dropout's
``nnx.Rngs`` hold typed PRNG keys; the export leaves them out of the serving graph (a
served model draws no random numbers). The SavedModel is written with
``build_raw_serving_input_receiver_fn`` and served with plain TensorFlow.

Run: ``python examples/nnx_digits.py [--model_dir DIR] [--steps N]`` (model_dir defaults
to ``runs/nnx_digits``, gitignored, emptied first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

import jaxspec
from jaxspec.export import PredictOutput

try:  # run as a script (examples/ on sys.path) or imported as examples.<name>
    from _runs import fresh_run_dir
except ImportError:
    from examples._runs import fresh_run_dir

NUM_CLASSES = 10


class MLP(nnx.Module):
    """64 -> 64 -> 10 with Dropout between; logits [batch, 10]."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(64, 64, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.out = nnx.Linear(64, NUM_CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        return self.out(self.drop(nnx.relu(self.hidden(x)), deterministic=not train))


def init_fn(features: dict[str, np.ndarray]) -> dict[str, Any]:
    """The first state: the module (seed 0) and Adam over its ``nnx.Param``s."""
    model = MLP(nnx.Rngs(0))
    return {"model": model, "optimizer": nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)}


def model_fn(features, labels, mode, state):
    model, optimizer = state["model"], state["optimizer"]
    x = features["x"]
    if mode == jaxspec.ModeKeys.PREDICT:
        probabilities = jax.nn.softmax(model(x, train=False))  # Dropout off
        return jaxspec.EstimatorSpec(
            mode,
            predictions={"probabilities": probabilities},
            export_outputs={"serving_default": PredictOutput({"probabilities": probabilities})},
        )

    def loss_of(m: MLP, train: bool = True) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(m(x, train), labels).mean()

    if mode == jaxspec.ModeKeys.EVAL:
        logits = model(x, train=False)
        accuracy = jaxspec.metrics.accuracy(labels, logits.argmax(-1))
        return jaxspec.EstimatorSpec(mode, loss=loss_of(model, False), eval_metric_ops={"accuracy": accuracy})
    # Dropout on, drawing from the module's own Rngs (their key advances in the state).
    loss, grads = nnx.value_and_grad(loss_of)(model)
    optimizer.update(model, grads)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"model": model, "optimizer": optimizer})


def input_fn(x: np.ndarray, y: np.ndarray, batch: int, repeat: bool) -> Any:
    def fn():
        while True:
            for s in range(0, len(x), batch):
                yield {"x": x[s : s + batch]}, y[s : s + batch]
            if not repeat:
                return

    return fn


def export(est: jaxspec.Estimator, export_base: str) -> str:
    """How to export a JAX Estimator: a raw receiver (one placeholder per feature, fed
    as it is), described by an example array of each feature; axis 0 is the batch, of
    any size in the SavedModel."""
    import tf_bridge  # imports TensorFlow (without its C++ start-up lines)

    receiver_fn = tf_bridge.build_raw_serving_input_receiver_fn({"x": np.zeros((1, 64), np.float32)})
    return est.export_saved_model(export_base, receiver_fn).decode()


def serve(export_dir: str, x: np.ndarray) -> np.ndarray:
    """The SavedModel's ``serving_default`` probabilities for ``x``, with TensorFlow alone."""
    import tf_bridge  # noqa: F401 - before TensorFlow, so that it is imported quietly

    tf = sys.modules["tensorflow"]
    loaded = tf.saved_model.load(export_dir)
    return loaded.signatures["serving_default"](x=tf.constant(x))["probabilities"].numpy()


def main(model_dir: str | None = None, steps: int = 300, n: int | None = None) -> dict[str, Any]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = (x[:n] / 16.0).astype(np.float32), y[:n].astype(np.int32)
    split = len(x) * 4 // 5
    model_dir = model_dir or fresh_run_dir("nnx_digits")
    est = jaxspec.Estimator(
        model_fn,
        config=jaxspec.RunConfig(model_dir=model_dir, log_step_count_steps=None, save_summary_steps=0),
        init_fn=init_fn,
    )
    est.train(input_fn(x[:split], y[:split], 32, repeat=True), steps=steps)
    metrics = est.evaluate(input_fn(x[split:], y[split:], 64, repeat=False))
    jax_probs = np.stack(
        [
            p["probabilities"]
            for p in est.predict(lambda: ({"x": x[s : s + 64]} for s in range(split, len(x), 64)))
        ]
    )
    export_dir = export(est, os.path.join(model_dir, "export"))
    served = serve(export_dir, x[split:])
    gap = float(np.abs(served - jax_probs).max())
    print(f"eval {metrics}; SavedModel {export_dir}; |served - predicted| = {gap:.2e}")
    summary = {"metrics": {k: float(v) for k, v in metrics.items()}, "export_dir": export_dir, "gap": gap}
    print("RESULT " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", default=None, help="defaults to runs/nnx_digits, emptied first")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--examples", type=int, default=None, help="use only the first N digits")
    args = parser.parse_args()
    main(args.model_dir, args.steps, args.examples)
