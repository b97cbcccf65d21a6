"""Eval throughput with streaming metrics: ``TPUEstimator.evaluate`` against a hand-written loop.

Both sides evaluate the digits model of ``examples/digits.py`` (MLP 128-64-10, trained
here for a few hundred steps so the numbers mean something) on the same pre-generated
global batches, data-parallel over a 1-D mesh of every device, ``iterations_per_loop``
steps per compiled ``lax.scan``, and compute the same three metrics:

* accuracy of the argmax class;
* auc: ROC over the one-hot labels and the softmax probabilities (micro-averaged over
  the 10 classes), 200 thresholds, TF's thresholds and trapezoidal sum;
* mean_per_class_accuracy over the 10 classes.

Methods:

* ``baseline``: ``jax.jit(jax.shard_map(lax.scan(step)))`` written by hand: each replica
  adds its rows' counts (correct predictions, per-threshold tp/fn/tn/fp, per-class
  totals) in the scan carry, ``psum`` once per loop; the host puts one chunk of
  ``iterations_per_loop`` batches on the mesh per loop and adds the loop's counts on
  device; the three values are computed once at the end. Compiled in a warm-up. Its
  threshold counts use the same algorithm as jaxspec (a binary search per prediction
  and a histogram), written independently, so the ratio measures the framework.
* ``baseline_compare``: the same loop counting as TF does, every prediction against every
  threshold (``[200, N]`` comparisons per step): what a straightforward port does.
* ``jaxspec``: a warm ``est.evaluate(input_fn)`` (same Estimator, second and later
  calls: the compiled loop is reused) with ``eval_metrics=(metric_fn, tensors)`` using
  ``jaxspec.metrics.accuracy/auc/mean_per_class_accuracy``: per loop, feeding, the
  compiled loop, merging states, and at the end compute, logging and the event file.
* ``jaxspec_loops``: inside a warm evaluate, end of the first loop to end of the last
  (a SessionRunHook's after_run), scaled to all steps: the steady per-loop cost.

Throughput is examples/s at the median of ``--repeats`` runs (alternating, one process).
The ratio is a method's throughput over ``baseline``'s (1.0 = no overhead). Both sides'
metric values are printed and must agree (same counts, same formulas).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxspec
from jaxspec import metrics

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # examples/digits.py imports examples._runs
AXIS = "replica"
C = 10
NUM_THRESHOLDS = 200


def _digits_module() -> Any:
    """examples/digits.py, for its MLP and data split (it imports TensorFlow only in main)."""
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples" / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DIGITS = _digits_module()
MLP = DIGITS.MLP


def train_params(x: np.ndarray, y: np.ndarray, steps: int = 300) -> Any:
    """The MLP trained briefly with plain JAX (not timed): adam 1e-2, batch 128."""
    params = MLP().init(jax.random.PRNGKey(0), x[:1])
    tx = optax.adam(1e-2)
    opt = tx.init(params)

    @jax.jit
    def step(params: Any, opt: Any, xb: Any, yb: Any) -> Any:
        loss_fn = lambda p: optax.softmax_cross_entropy_with_integer_labels(MLP().apply(p, xb), yb).mean()  # noqa: E731
        grads = jax.grad(loss_fn)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt

    rng = np.random.RandomState(0)
    for _ in range(steps):
        idx = rng.randint(0, len(x), 128)
        params, opt = step(params, opt, x[idx], y[idx])
    return params


def make_batches(x: np.ndarray, y: np.ndarray, steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` global batches ``[steps, batch, 64]`` / ``[steps, batch]`` cycling the held-out images."""
    idx = np.arange(steps * batch) % len(x)
    return x[idx].reshape(steps, batch, -1), y[idx].reshape(steps, batch)


# -- baseline ---------------------------------------------------------------------------------
def _cutoffs() -> np.ndarray:
    """TF's auc thresholds for 200: -1e-7, i/199 for i in 1..198, 1 + 1e-7 (float32)."""
    inner = [(i + 1) * 1.0 / (NUM_THRESHOLDS - 1) for i in range(NUM_THRESHOLDS - 2)]
    return np.asarray([0.0 - 1e-7] + inner + [1.0 + 1e-7], np.float32)


def _threshold_counts(
    probs: jax.Array, pos: jax.Array, thresholds: jax.Array, counting: str
) -> dict[str, jax.Array]:
    """tp/fn/tn/fp per threshold, ``probs > t`` positive. ``compare``: every prediction
    against every threshold (TF's way, ``[T, N]``); ``bucket``: a binary search per
    prediction, a histogram and prefix/suffix sums (``O(N log T)``)."""
    if counting == "compare":
        above = probs[None, :] > thresholds[:, None]
        return {
            "tp": jnp.sum(above & pos, 1).astype(jnp.float32),
            "fn": jnp.sum(~above & pos, 1).astype(jnp.float32),
            "tn": jnp.sum(~above & ~pos, 1).astype(jnp.float32),
            "fp": jnp.sum(above & ~pos, 1).astype(jnp.float32),
        }
    bucket = jnp.searchsorted(thresholds, probs, side="left")
    hist_pos = jnp.zeros(NUM_THRESHOLDS + 1).at[bucket].add(pos.astype(jnp.float32))
    hist_neg = jnp.zeros(NUM_THRESHOLDS + 1).at[bucket].add((~pos).astype(jnp.float32))
    below = lambda h: jnp.cumsum(h)[:-1]  # noqa: E731
    over = lambda h: jnp.cumsum(h[::-1])[::-1][1:]  # noqa: E731
    return {"tp": over(hist_pos), "fn": below(hist_pos), "tn": below(hist_neg), "fp": over(hist_neg)}


def make_baseline(mesh: Mesh, counting: str) -> Any:
    thresholds = jnp.asarray(_cutoffs())

    def loop(params: Any, xs: jax.Array, ys: jax.Array) -> dict[str, jax.Array]:
        def body(carry: dict[str, jax.Array], batch: Any) -> Any:
            xb, yb = batch
            logits = MLP().apply(params, xb)
            pred = jnp.argmax(logits, -1)
            probs = jax.nn.softmax(logits).reshape(-1)
            onehot = yb[:, None] == jnp.arange(C)
            pos = onehot.reshape(-1)
            hit = pred == yb
            stats = {
                "correct": jnp.sum(hit.astype(jnp.float32)),
                **_threshold_counts(probs, pos, thresholds, counting),
                "class_total": jnp.sum(onehot, 0).astype(jnp.float32),
                "class_correct": jnp.sum(onehot & hit[:, None], 0).astype(jnp.float32),
            }
            return jax.tree.map(jnp.add, carry, stats), None

        zeros = {
            "correct": jnp.zeros(()),
            **{k: jnp.zeros(NUM_THRESHOLDS) for k in ("tp", "fn", "tn", "fp")},
            "class_total": jnp.zeros(C),
            "class_correct": jnp.zeros(C),
        }
        stats, _ = jax.lax.scan(body, zeros, (xs, ys))
        return jax.lax.psum(stats, AXIS)

    specs = (P(), P(None, AXIS), P(None, AXIS))
    return jax.jit(jax.shard_map(loop, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False))


def baseline_values(stats: dict[str, np.ndarray], examples: int) -> dict[str, float]:
    """The three metrics from the summed counts, by the formulas TF uses (float32)."""
    s = {k: np.asarray(v, np.float32) for k, v in stats.items()}
    eps = np.float32(1e-6)
    rec = (s["tp"] + eps) / (s["tp"] + s["fn"] + eps)
    fpr = s["fp"] / (s["fp"] + s["tn"] + eps)
    auc = np.sum((fpr[:-1] - fpr[1:]) * ((rec[:-1] + rec[1:]) / np.float32(2.0)))
    per_class = np.where(s["class_total"] > 0, s["class_correct"] / np.maximum(s["class_total"], 1), 0)
    return {
        "accuracy": float(s["correct"] / examples),
        "auc": float(auc),
        "mean_per_class_accuracy": float(np.mean(per_class)),
    }


def run_baseline(
    fn: Any, params: Any, xs: np.ndarray, ys: np.ndarray, ipl: int, sharding: NamedSharding
) -> tuple[float, dict[str, float]]:
    """Seconds for all steps (host->mesh puts included) and the metric values."""
    add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
    t0 = time.perf_counter()
    total = None
    for i in range(0, len(xs), ipl):
        out = fn(params, jax.device_put(xs[i : i + ipl], sharding), jax.device_put(ys[i : i + ipl], sharding))
        total = out if total is None else add(total, out)
    stats = jax.tree.map(np.asarray, total)
    return time.perf_counter() - t0, baseline_values(stats, xs.shape[0] * xs.shape[1])


# -- jaxspec --------------------------------------------------------------------------------------
def metric_fn(labels: Any, logits: Any) -> dict[str, Any]:
    pred = jnp.argmax(logits, -1)
    return {
        "accuracy": metrics.accuracy(labels, pred),
        "auc": metrics.auc(jax.nn.one_hot(labels, C), jax.nn.softmax(logits)),
        "mean_per_class_accuracy": metrics.mean_per_class_accuracy(labels, pred, C),
    }


def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.TPUEstimatorSpec:
    logits = MLP().apply(state["params"], features["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))


class LoopClock(jaxspec.SessionRunHook):
    """The time at the end of every loop."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.times.append(time.perf_counter())


def make_estimator(model_dir: str, params: Any, batch: int, ipl: int) -> jaxspec.TPUEstimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl),
    )
    return jaxspec.TPUEstimator(
        model_fn,
        config=config,
        params={},
        use_tpu=True,
        train_batch_size=batch,
        eval_batch_size=batch,
        init_fn=lambda: {"params": params},
    )


def run_jaxspec(
    est: jaxspec.TPUEstimator, xs: np.ndarray, ys: np.ndarray
) -> tuple[float, float, dict[str, Any]]:
    """(seconds of the evaluate call, steady seconds scaled to all steps, results)."""

    def input_fn(params: dict[str, Any]) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        return (({"x": xs[i]}, ys[i]) for i in range(len(xs)))

    clock = LoopClock()
    t0 = time.perf_counter()
    results = est.evaluate(input_fn, hooks=[clock])
    total = time.perf_counter() - t0
    loops = len(clock.times)
    steady = (clock.times[-1] - clock.times[0]) * loops / (loops - 1) if loops > 1 else float("nan")
    return total, steady, results


# -- driver -------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64, help="eval steps (global batches) per evaluation")
    ap.add_argument("--batch", type=int, default=512, help="global eval batch (divisible by the devices)")
    ap.add_argument("--iterations-per-loop", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval_metrics.json"))
    args = ap.parse_args()
    ipl, steps, batch = args.iterations_per_loop, args.steps, args.batch
    if steps % ipl or steps < 2 * ipl:
        ap.error("--steps must be a multiple of --iterations-per-loop and at least twice it")
    logging.getLogger("jaxspec").setLevel(logging.WARNING)

    x_train, y_train, x_test, y_test = DIGITS.load_data()
    params = train_params(x_train, y_train)
    xs, ys = make_batches(x_test, y_test, steps, batch)
    examples = steps * batch
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    sharding = NamedSharding(mesh, P(None, AXIS))
    mesh_params = jax.device_put(params, NamedSharding(mesh, P()))
    baselines = {
        "baseline": make_baseline(mesh, "bucket"),
        "baseline_compare": make_baseline(mesh, "compare"),
    }
    print(
        f"{jax.device_count()} {jax.devices()[0].platform} devices, {steps} steps x {batch} examples "
        f"({examples} per evaluation), {ipl} steps per loop, {args.repeats} repeats"
    )

    with tempfile.TemporaryDirectory(prefix="jaxspec_eval_bench_") as model_dir:
        est = make_estimator(model_dir, params, batch, ipl)
        for fn in baselines.values():
            run_baseline(fn, mesh_params, xs[:ipl], ys[:ipl], ipl, sharding)  # warm-up: compile
        cold, _, _ = run_jaxspec(est, xs, ys)  # warm-up: trace, compile, caches
        times: dict[str, list[float]] = {name: [] for name in (*baselines, "jaxspec", "jaxspec_loops")}
        base_values: dict[str, dict[str, float]] = {}
        for rep in range(args.repeats):
            for name, fn in baselines.items():
                t_base, base_values[name] = run_baseline(fn, mesh_params, xs, ys, ipl, sharding)
                times[name].append(t_base)
            t_js, t_loops, results = run_jaxspec(est, xs, ys)
            times["jaxspec"].append(t_js)
            times["jaxspec_loops"].append(t_loops)
            print(
                f"rep {rep}: baseline {times['baseline'][-1]:.3f}s  baseline_compare "
                f"{times['baseline_compare'][-1]:.3f}s  jaxspec evaluate {t_js:.3f}s  steady loops {t_loops:.3f}s"
            )

    names = ("accuracy", "auc", "mean_per_class_accuracy")
    diffs = {k: max(abs(results[k] - v[k]) for v in base_values.values()) for k in names}
    base_rate = examples / statistics.median(times["baseline"])
    rows: dict[str, dict[str, Any]] = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        rows[name] = {
            "median_s": med,
            "min_s": min(ts),
            "max_s": max(ts),
            "examples_per_s": examples / med,
            "ratio_vs_baseline": (examples / med) / base_rate,
            "times_s": ts,
        }
    print(f"\n{'method':<17}{'median s':>10}{'min s':>9}{'max s':>9}{'examples/s':>12}{'ratio':>8}")
    for name, r in rows.items():
        print(
            f"{name:<17}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}"
            f"{r['examples_per_s']:>12.0f}{r['ratio_vs_baseline']:>8.2f}"
        )
    print(f"(first evaluate call, with tracing and compilation: {cold:.3f}s)")
    print(
        "\nmetric values   "
        + "  ".join(f"{k}: jaxspec {results[k]:.6f} baseline {base_values['baseline'][k]:.6f}" for k in names)
    )
    print(
        f"throughput ratio jaxspec/baseline (median, whole evaluate call): "
        f"{rows['jaxspec']['ratio_vs_baseline']:.2f}; steady loops: {rows['jaxspec_loops']['ratio_vs_baseline']:.2f}"
    )

    result = {
        "config": {
            "steps": steps,
            "global_batch": batch,
            "examples": examples,
            "iterations_per_loop": ipl,
            "repeats": args.repeats,
            "devices": jax.device_count(),
            "platform": jax.devices()[0].platform,
            "jax": jax.__version__,
            "jaxspec": jaxspec.__version__,
        },
        "methods": rows,
        "first_evaluate_s": cold,
        "values": {"jaxspec": {k: results[k] for k in names}, "baseline": base_values, "max_abs_diff": diffs},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    if max(diffs.values()) > 1e-5:
        raise SystemExit(f"jaxspec and the baseline disagree: {diffs}")


if __name__ == "__main__":
    main()
