"""Serving latency of a jaxspec SavedModel in TensorFlow, against jaxspec's own compiled
predict and against the same architecture built in Keras and exported by Keras.

One model, three ways, same weights:

* ``tf_savedmodel``: ``Estimator.export_saved_model`` of the digits MLP (64 → 128 → 64 →
  10, relu, softmax; PREDICT head ``class_ids`` + ``probabilities``) with a raw float
  receiver, loaded with ``tf.saved_model.load`` and called through its
  ``serving_default`` signature (one ``XlaCallModule`` op, as TF Serving runs it);
* ``jaxspec_predict``: the compiled PREDICT step jaxspec runs in ``Estimator.predict``
  (``StepEngine.predict_loop``, one step, one device), input already on the device;
* ``keras``: ``keras.Sequential`` of the same layers, the same weights copied in,
  exported with ``model.export`` and called through ``serve`` after
  ``tf.saved_model.load``.

Per batch size (1, 64) each side is warmed up, then called ``--calls`` times one after
another, waiting for the result each time (``.numpy()`` / ``block_until_ready``); the
table gives the median and 90th percentile in microseconds and the ratios of the medians
(``tf / jax``: what going through TF costs over calling JAX; ``tf / keras``: the jaxspec
SavedModel against a native Keras one). The outputs of the three agree to 1e-5. On a
shared CPU the numbers are noisy; run it on an idle machine for figures to quote.

Run: ``.venv/bin/python benchmarks/serving.py [--calls N] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import jaxspec
from jaxspec.engine.steps import StepEngine
from jaxspec.export import PredictOutput

BATCHES = (1, 64)
WARMUP = 20


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(128)(x))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(10)(x)


def model_fn(features, labels, mode, state):
    logits = state.apply_fn(state.params, features["x"])
    if mode == jaxspec.ModeKeys.PREDICT:
        out = {"class_ids": jnp.argmax(logits, -1), "probabilities": jax.nn.softmax(logits)}
        return jaxspec.EstimatorSpec(
            mode, predictions=out, export_outputs={"serving_default": PredictOutput(out)}
        )

    def loss_of(p):
        return optax.softmax_cross_entropy_with_integer_labels(
            state.apply_fn(p, features["x"]), labels
        ).mean()

    loss, grads = jax.value_and_grad(loss_of)(state.params)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def init_fn(rng, features):
    model = MLP()
    params = model.init(rng, jnp.asarray(features["x"][:1]))
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2))


def _time(call: Callable[[], Any], calls: int) -> dict[str, float]:
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return {"median_us": statistics.median(times), "p90_us": times[int(0.9 * (len(times) - 1))]}


def main(calls: int, out: str) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    import tf_bridge

    workdir = tempfile.mkdtemp(prefix="jaxspec_serving_")
    rs = np.random.RandomState(0)
    x_train = rs.rand(256, 64).astype(np.float32)
    y_train = rs.randint(0, 10, 256).astype(np.int32)
    est = jaxspec.Estimator(
        model_fn,
        os.path.join(workdir, "model"),
        init_fn=init_fn,
        config=jaxspec.RunConfig(log_step_count_steps=None, save_summary_steps=None),
    )
    est.train(lambda: iter([({"x": x_train[s : s + 64]}, y_train[s : s + 64]) for s in range(0, 256, 64)]))
    receiver = tf_bridge.build_raw_serving_input_receiver_fn(
        {"x": tf.TensorSpec([None, 64], tf.float32, name="x")}
    )
    export_dir = est.export_saved_model(os.path.join(workdir, "export"), receiver).decode()
    loaded = tf.saved_model.load(export_dir)  # kept: its signatures use its variables
    serving = loaded.signatures["serving_default"]

    # jaxspec's compiled predict step, with the checkpoint's state.
    engine = StepEngine(est.model_fn, {jaxspec.ModeKeys.PREDICT: {}}, est.config, mesh=None)
    loop = jax.jit(engine.predict_loop(record=lambda parts: None).fn)
    params = {
        name.removeprefix("params/"): est.get_variable_value(name)
        for name in est.get_variable_names()
        if name.startswith("params/")
    }
    state = init_fn(jax.random.PRNGKey(0), {"x": x_train[:1]})
    state = state.replace(
        params=jax.tree_util.tree_map_with_path(
            lambda p, _: jnp.asarray(params[jax.tree_util.keystr(p, simple=True, separator="/")]),
            state.params,
        )
    )
    key = jax.random.PRNGKey(0)
    step = jnp.zeros((), jnp.int32)

    # Keras: the same layers, the same weights, exported by Keras.
    kmodel = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Softmax(),
        ]
    )
    for i, layer in enumerate(kmodel.layers[:3]):
        layer.set_weights([params[f"params/Dense_{i}/kernel"], params[f"params/Dense_{i}/bias"]])
    keras_dir = os.path.join(workdir, "keras")
    kmodel.export(keras_dir, verbose=False)
    keras_loaded = tf.saved_model.load(keras_dir)
    keras_serve = keras_loaded.serve

    rows = {}
    for batch in BATCHES:
        x = rs.rand(batch, 64).astype(np.float32)
        x_tf = tf.constant(x)
        x_jax = jax.device_put(x[None])
        compiled = loop.lower(state, step, key, {"x": x_jax}).compile()
        jax_probs = np.asarray(compiled(state, step, key, {"x": x_jax})[0]["probabilities"][0])
        tf_probs = serving(x=x_tf)["probabilities"].numpy()
        keras_probs = keras_serve(x_tf).numpy()
        agree = float(max(np.abs(tf_probs - jax_probs).max(), np.abs(keras_probs - jax_probs).max()))
        assert agree <= 1e-5, f"the three disagree by {agree}"
        row = {
            "tf_savedmodel": _time(lambda x_tf=x_tf: serving(x=x_tf)["probabilities"].numpy(), calls),
            "jaxspec_predict": _time(
                lambda c=compiled, x=x_jax: jax.block_until_ready(c(state, step, key, {"x": x})), calls
            ),
            "keras": _time(lambda x_tf=x_tf: keras_serve(x_tf).numpy(), calls),
            "max_abs_diff": agree,
        }
        row["tf_over_jax"] = row["tf_savedmodel"]["median_us"] / row["jaxspec_predict"]["median_us"]
        row["tf_over_keras"] = row["tf_savedmodel"]["median_us"] / row["keras"]["median_us"]
        rows[str(batch)] = row

    print(
        f"{'batch':>5} | {'tf_savedmodel':>18} | {'jaxspec_predict':>18} | {'keras':>18} | tf/jax | tf/keras"
    )
    for batch, row in rows.items():
        cells = " | ".join(
            f"{row[k]['median_us']:8.0f} ({row[k]['p90_us']:6.0f})"
            for k in ("tf_savedmodel", "jaxspec_predict", "keras")
        )
        print(f"{batch:>5} | {cells} | {row['tf_over_jax']:6.2f} | {row['tf_over_keras']:8.2f}")
    print("median (p90) microseconds per call")
    result = {
        "calls": calls,
        "warmup": WARMUP,
        "batches": rows,
        "versions": {"jax": jax.__version__, "tensorflow": tf.__version__, "keras": keras.__version__},
        "cpu_count": os.cpu_count(),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "serving.json"))
    args = parser.parse_args()
    main(args.calls, args.out)
