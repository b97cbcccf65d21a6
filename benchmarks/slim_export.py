"""Size of a PREDICT export of a 100+ MiB model trained with Adam: the bytes under the
SavedModel's ``variables/`` against the bytes of the state leaves PREDICT reads (the
parameters) and of the whole state (parameters, Adam's ``mu`` and ``nu``, counters).

The model: an MLP 64 -> 4096 -> 4096 -> 4096 -> 10 (33.9 M float32 parameters, 129 MiB),
a flax TrainState with ``optax.adam``, trained one step; its model_fn's PREDICT reads
``state.params`` only. ``export_saved_model`` with a raw float receiver writes the
SavedModel (and, unless ``--no-artifact``, the TF-free ``jax/`` artifact); the outputs
TF serves and those of ``jax/`` are checked against ``Estimator.predict`` (1e-5).

Goal (issue 34): ``variables/`` <= 1.05x the bytes of the leaves read. Run the same
script from a checkout before the change with ``--no-artifact`` for the old size.

Run: ``.venv/bin/python benchmarks/slim_export.py [--hidden 4096] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

import jaxspec
from jaxspec.export import PredictOutput


class WideMlp(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(3):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(10)(x)


def model_fn(features, labels, mode, state):
    def logits_of(p):
        return state.apply_fn({"params": p}, features["x"])

    if mode == jaxspec.ModeKeys.PREDICT:
        logits = logits_of(state.params)
        return jaxspec.EstimatorSpec(
            mode,
            predictions={"logits": logits},
            export_outputs={"serving_default": PredictOutput({"logits": logits})},
        )
    loss, grads = jax.value_and_grad(
        lambda p: optax.softmax_cross_entropy_with_integer_labels(logits_of(p), labels).mean()
    )(state.params)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def run(hidden: int, artifact: bool) -> dict[str, Any]:
    import tensorflow as tf

    import tf_bridge

    def init_fn(rng):
        model = WideMlp(hidden)
        params = model.init(rng, jnp.zeros((1, 64)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-4))

    rs = np.random.RandomState(0)
    x, y = rs.rand(32, 64).astype(np.float32), rs.randint(0, 10, 32).astype(np.int32)
    root = tempfile.mkdtemp(prefix="slim_export_")
    config = jaxspec.RunConfig(model_dir=root, save_checkpoints_steps=None, save_checkpoints_secs=None)
    est = jaxspec.Estimator(model_fn, root, config=config, init_fn=init_fn)
    est.train(lambda: iter([({"x": x}, y)]), steps=1)
    names = est.get_variable_names()
    values = {n: np.asarray(est.get_variable_value(n)) for n in names}
    read = sum(v.nbytes for n, v in values.items() if n.startswith("params/"))
    total = sum(v.nbytes for n, v in values.items() if n != "global_step")
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
    start = time.perf_counter()
    kwargs = {"jax_artifact": True} if artifact else {}
    path = est.export_saved_model(os.path.join(root, "export"), receiver, **kwargs).decode()
    seconds = time.perf_counter() - start
    want = np.stack([p["logits"] for p in est.predict(lambda: iter([{"x": x}]))])
    served = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(x))["logits"].numpy()
    result = {
        "hidden": hidden,
        "params_mib": read / 2**20,
        "state_mib": total / 2**20,
        "variables_mib": _dir_bytes(os.path.join(path, "variables")) / 2**20,
        "export_seconds": seconds,
        "tf_gap": float(np.abs(served - want).max()),
    }
    result["variables_over_read"] = result["variables_mib"] / result["params_mib"]
    if artifact:
        from jaxspec.export import load_serving

        got = load_serving(path)["serving_default"]({"x": x})["logits"]
        result["jax_gap"] = float(np.abs(got - want).max())
        result["jax_artifact_mib"] = _dir_bytes(os.path.join(path, "jax")) / 2**20
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--no-artifact", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "slim_export.json"))
    args = parser.parse_args()
    result = run(args.hidden, not args.no_artifact)
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
