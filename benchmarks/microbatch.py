"""Gradient accumulation: ``jaxspec.microbatched_value_and_grad`` in an Estimator's
train loop, for memory (against no accumulation) and speed (against a hand-written
``lax.scan`` accumulation).

The model is activation-heavy on purpose: a 16-layer tanh MLP 64 wide on batches of
4096 rows, so the activations kept for the backward pass (about 16 x 4096 x 64 floats
per saved tensor) dwarf the 260 KiB of parameters. Three plain ``jaxspec.Estimator``s
train it with SGD, their model_fns differing only in the gradient call:

* ``whole``: ``jax.value_and_grad`` on the whole batch (1 microbatch);
* ``microbatched``: ``jaxspec.microbatched_value_and_grad(loss, 4)``;
* ``hand_scan``: a hand-written ``lax.scan`` over 4 parts summing ``jax.value_and_grad``.

Memory: ``memory_analysis().temp_size_in_bytes`` of each Estimator's compiled train
loops (the largest over the loop sizes it compiled); goal microbatched <= 0.4x whole.
Speed: warm ``train(steps=N)`` calls, microbatched and hand_scan alternating (ABBA),
median seconds; ratio = microbatched steps/s / hand_scan steps/s, goal >= 0.95 (also
the ratio of the fastest calls, which a loaded machine disturbs least). The three
Estimators' parameters after the first call are compared (they must agree to 1e-4).
Results go to ``results/microbatch.json``. On a shared machine rerun before trusting a
small difference; on a GPU it runs unchanged.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAXSPEC_BENCH_HOST_DEVICES", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from _common import QUIET_CONFIG, write_json  # noqa: E402
from flax.training import train_state  # noqa: E402

import jaxspec  # noqa: E402
from jaxspec.mode_keys import ModeKeys  # noqa: E402

LAYERS, WIDTH, BATCH, PARTS = 16, 64, 4096, 4
GOALS = {"temp_ratio": 0.4, "speed_ratio": 0.95}


def loss_fn(params: Any, x: Any, y: Any) -> Any:
    h = x
    for w in params["layers"]:
        h = jnp.tanh(h @ w)
    return jnp.mean((h @ params["out"] - y) ** 2)


def hand_scan_value_and_grad(params: Any, x: Any, y: Any) -> Any:
    """The accumulation a user writes by hand: a scan over PARTS parts."""
    xs, ys = x.reshape(PARTS, -1, x.shape[-1]), y.reshape(PARTS, -1, y.shape[-1])

    def body(acc: Any, part: Any) -> Any:
        value, grads = jax.value_and_grad(loss_fn)(params, *part)
        return (acc[0] + value, jax.tree.map(jnp.add, acc[1], grads)), None

    zeros = (jnp.float32(0.0), jax.tree.map(jnp.zeros_like, params))
    (value, grads), _ = jax.lax.scan(body, zeros, (xs, ys))
    return value / PARTS, jax.tree.map(lambda g: g / PARTS, grads)


GRADS = {
    "whole": jax.value_and_grad(loss_fn),
    "microbatched": jaxspec.microbatched_value_and_grad(loss_fn, PARTS),
    "hand_scan": hand_scan_value_and_grad,
}


def init_fn() -> Any:
    keys = jax.random.split(jax.random.key(0), LAYERS + 1)
    scale = 1.0 / np.sqrt(WIDTH)
    params = {
        "layers": [jax.random.normal(k, (WIDTH, WIDTH)) * scale for k in keys[:-1]],
        "out": jax.random.normal(keys[-1], (WIDTH, 1)) * scale,
    }
    return train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(0.01))


def make_model_fn(grad_fn: Any) -> Any:
    def model_fn(features, labels, mode, state):
        loss, grads = grad_fn(state.params, features["x"], labels)
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))

    return model_fn


def temp_bytes(est: jaxspec.Estimator) -> int:
    compiled = est._compile_cache.modes[ModeKeys.TRAIN].compiled.values()
    return max(int(c.memory_analysis().temp_size_in_bytes) for c in compiled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed train() call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/microbatch.json")
    args = parser.parse_args()
    logging.getLogger("jaxspec").setLevel(logging.WARNING)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    y = np.sin(x[:, :1]).astype(np.float32)
    batches = lambda: iter([({"x": x}, y)] * args.steps)  # noqa: E731
    root = tempfile.mkdtemp(prefix="bench_microbatch_")
    ests = {}
    for name, grad_fn in GRADS.items():
        config = jaxspec.RunConfig(model_dir=os.path.join(root, name), **QUIET_CONFIG)
        ests[name] = jaxspec.Estimator(make_model_fn(grad_fn), config=config, init_fn=init_fn)
        ests[name].train(batches)  # compiles; the timed calls below are warm
    params = {n: [e.get_variable_value(f"params/layers/{i}") for i in range(LAYERS)] for n, e in ests.items()}
    diff = max(
        float(np.max(np.abs(a - b)))
        for n in ("microbatched", "hand_scan")
        for a, b in zip(params[n], params["whole"], strict=True)
    )
    temps = {n: temp_bytes(e) for n, e in ests.items()}
    times: dict[str, list[float]] = {"microbatched": [], "hand_scan": []}
    for r in range(args.repeats):
        for name in list(times) if r % 2 == 0 else list(times)[::-1]:  # ABBA: no order bias
            start = time.perf_counter()
            ests[name].train(batches)
            times[name].append(time.perf_counter() - start)
    med = {n: statistics.median(t) for n, t in times.items()}
    result = {
        "model": {"layers": LAYERS, "width": WIDTH, "batch": BATCH, "microbatches": PARTS},
        "device": str(jax.devices()[0].platform),
        "temp_size_in_bytes": temps,
        "temp_ratio": temps["microbatched"] / temps["whole"],
        "temp_ratio_hand_scan": temps["hand_scan"] / temps["whole"],
        "steps_per_s": {n: args.steps / m for n, m in med.items()},
        "times_s": times,
        "speed_ratio": med["hand_scan"] / med["microbatched"],
        "speed_ratio_of_fastest": min(times["hand_scan"]) / min(times["microbatched"]),
        "max_param_diff_vs_whole": diff,
        "load_average": os.getloadavg(),
        "goals": GOALS,
    }
    for key, goal in GOALS.items():
        ok = result[key] <= goal if key == "temp_ratio" else result[key] >= goal
        print(
            f"{key}: {result[key]:.3f} (goal {'<=' if key == 'temp_ratio' else '>='} {goal}: {'met' if ok else 'NOT met'})"
        )
    print({n: f"{t / 2**20:.1f} MiB" for n, t in temps.items()}, f"param diff {diff:.2e}")
    write_json(args.out, result)
    if diff > 1e-4:
        sys.exit(f"parameters differ by {diff}")


if __name__ == "__main__":
    main()
