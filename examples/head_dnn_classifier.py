"""A DNNClassifier-equivalent model_fn: a flax MLP under ``jaxspec.MultiClassHead``.

``tf.estimator.DNNClassifier(hidden_units=[64, 32], n_classes=10, feature_columns=...)``
is a ReLU MLP whose logits go into a MultiClassHead (a BinaryClassHead for two classes),
trained by Adagrad with learning rate 0.05. Here the same model is a jaxspec model_fn: the
head gives the loss, the eval metrics (``accuracy``, ``average_loss``), the predictions
(``probabilities``, ``class_ids``, ...) and the export outputs; training passes the
logits as a function of the parameters, and the new state comes back as ``train_op``.
Trains on scikit-learn's handwritten digits, evaluates on the held-out images, predicts.

Run: ``python examples/head_dnn_classifier.py [--model_dir DIR] [--steps N]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from flax.training import train_state

import jaxspec

try:  # run as a script (examples/ on sys.path) or imported as examples.<name>
    from _runs import fresh_run_dir
except ImportError:
    from examples._runs import fresh_run_dir

N_CLASSES = 10


class DNN(nn.Module):
    """DNNClassifier's network: Dense + ReLU per hidden layer, then a linear logits layer."""

    hidden_units: Sequence[int]
    logits_dimension: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for units in self.hidden_units:
            x = nn.relu(nn.Dense(units)(x))
        return nn.Dense(self.logits_dimension)(x)


def make_model_fn(head: jaxspec.heads.Head) -> Any:
    """The model_fn: every mode is one ``head.create_estimator_spec`` call."""

    def model_fn(features, labels, mode, state):
        x = features["x"]
        if mode == jaxspec.ModeKeys.TRAIN:  # JAX differentiates functions: logits of the params
            logits = lambda params: state.apply_fn(params, x)  # noqa: E731
            return head.create_estimator_spec(
                features=features,
                mode=mode,
                logits=logits,
                labels=labels,
                optimizer=state.tx,
                trainable_variables=state,
            )
        return head.create_estimator_spec(
            features=features, mode=mode, logits=state.apply_fn(state.params, x), labels=labels
        )

    return model_fn


def make_init_fn(hidden_units: Sequence[int], head: jaxspec.heads.Head) -> Any:
    """The first state: the MLP's parameters and Adagrad(0.05), DNNClassifier's default
    optimizer (TF's Adagrad starts its accumulators at 0.1)."""
    model = DNN(hidden_units=tuple(hidden_units), logits_dimension=head.logits_dimension)

    def init_fn(rng, features):
        params = model.init(rng, features["x"][:1])
        tx = optax.adagrad(0.05, initial_accumulator_value=0.1, eps=1e-7)
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    return init_fn


def load_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits split 80/20: x float32 ``[n, 64]`` in [0, 1], y int32 ``[n, 1]``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed)
    return x_train, y_train, x_test, y_test


def make_input_fn(x: np.ndarray, y: np.ndarray | None, batch: int, repeat: bool) -> Any:
    def input_fn():
        def gen():
            rng = np.random.default_rng(0)
            while True:
                order = rng.permutation(len(x)) if repeat else np.arange(len(x))
                for s in range(0, len(x), batch):
                    rows = order[s : s + batch]
                    if repeat and len(rows) < batch:
                        continue
                    yield {"x": x[rows]} if y is None else ({"x": x[rows]}, y[rows])
                if not repeat:
                    return

        return gen()

    return input_fn


def main(
    model_dir: str | None = None, steps: int = 300, hidden_units: Sequence[int] = (64, 32)
) -> dict[str, Any]:
    """Train, evaluate and predict; return the evaluation and the first predictions."""
    model_dir = model_dir or fresh_run_dir("head_dnn_classifier")
    head = jaxspec.MultiClassHead(n_classes=N_CLASSES)
    estimator = jaxspec.Estimator(
        make_model_fn(head),
        model_dir=model_dir,
        config=jaxspec.RunConfig(model_dir=model_dir, log_step_count_steps=None, save_summary_steps=0),
        init_fn=make_init_fn(hidden_units, head),
    )
    x_train, y_train, x_test, y_test = load_data()
    estimator.train(make_input_fn(x_train, y_train, 32, repeat=True), steps=steps)
    evaluation = estimator.evaluate(make_input_fn(x_test, y_test, 120, repeat=False))
    predictions = list(estimator.predict(make_input_fn(x_test, None, 120, repeat=False)))
    print({k: round(float(v), 4) for k, v in evaluation.items()})
    return {"evaluation": evaluation, "predictions": predictions, "labels": y_test[:, 0]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model_dir", default=None, help="defaults to runs/head_dnn_classifier, emptied first"
    )
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    main(args.model_dir, args.steps)
