"""Overhead of ``jaxspec.TPUEstimator.train`` against a hand-written JAX training loop.

Both sides train the same digits MLP (Dense(64)-relu-Dense(10), softmax cross entropy,
adam 1e-2 on gradients averaged over replicas) data-parallel over a 1-D mesh of all
devices, ``iterations_per_loop`` steps per compiled ``lax.scan``, on the same global
batches (generated up front as numpy, so input generation is not measured) from the same
initial parameters:

* baseline: ``jax.jit(jax.shard_map(lax.scan(step)))``; per loop the host puts one stacked
  chunk ``[iterations, batch, ...]`` on the mesh (batch axis split) and dispatches; the
  result is read once at the end. Compiled once in a warm-up; every repetition is
  steady state.
* jaxspec ``cold``: the full ``est.train(input_fn, steps=N)`` on a fresh model_dir, so it
  includes tracing, compiling, state init, per-loop host work and the final checkpoint.
* jaxspec ``warm``: a second ``train(steps=N)`` on the same estimator (restores the
  checkpoint and continues).
* jaxspec ``loops``: from the cold call, the time between the end of the first loop and
  the end of the last (taken by a SessionRunHook), scaled to N steps: steady-state
  per-loop cost without setup, compilation or the final save.

Each ratio divides a jaxspec median by the baseline median. The final training losses
of the two must agree (same math, same data order). On CPU (virtual devices) the numbers
show framework overhead, not accelerator speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import flax.linen as nn
import jax
import numpy as np
import optax
from _common import LoopClock, digits_batches  # benchmarks/ is on sys.path when run
from flax.training import train_state
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxspec

AXIS = "replica"
BATCH = 128
LR = 1e-2
SEED = 0
NEVER = 10**9  # save_summary_steps / log_step_count_steps that never fire


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(10)(nn.relu(nn.Dense(64)(x)))


def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(MLP().apply(params, x), y).mean()


def init_params(x: np.ndarray) -> Any:
    return MLP().init(jax.random.PRNGKey(SEED), x[:1])


# -- baseline: jit(shard_map(scan)) ---------------------------------------------------------
def make_baseline(mesh: Mesh) -> Callable[..., Any]:
    tx = optax.adam(LR)

    def loop(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def body(carry: Any, batch: Any) -> Any:
            p, o = carry
            loss, grads = jax.value_and_grad(loss_fn)(p, *batch)
            # One all-reduce over all gradients (float32 here), as CrossShardOptimizer does:
            # same math, and the cheapest collective a hand-written loop would use.
            flat, unravel = ravel_pytree(grads)
            updates, o = tx.update(unravel(jax.lax.pmean(flat, AXIS)), o, p)
            return (optax.apply_updates(p, updates), o), loss[None]

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (x, y))
        return params, opt_state, losses

    specs = (P(), P(), P(None, AXIS), P(None, AXIS))
    return jax.jit(
        jax.shard_map(loop, mesh=mesh, in_specs=specs, out_specs=(P(), P(), P(None, AXIS)), check_vma=False)
    )


def run_baseline(
    fn: Callable[..., Any], state0: Any, xs: np.ndarray, ys: np.ndarray, ipl: int, sharding: NamedSharding
) -> tuple[float, float]:
    """Seconds for ``len(xs)`` steps (host->mesh puts included) and the last step's loss."""
    params, opt_state = state0
    t0 = time.perf_counter()
    for i in range(0, len(xs), ipl):
        x, y = jax.device_put(xs[i : i + ipl], sharding), jax.device_put(ys[i : i + ipl], sharding)
        params, opt_state, losses = fn(params, opt_state, x, y)
    last = float(np.asarray(losses)[-1].mean())  # replica mean on the host, as jaxspec
    jax.block_until_ready(params)
    return time.perf_counter() - t0, last


# -- jaxspec --------------------------------------------------------------------------------
def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.TPUEstimatorSpec:
    loss, grads = jax.value_and_grad(loss_fn)(state.params, features["x"], labels)
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def init_fn(features: Any) -> train_state.TrainState:
    return train_state.TrainState.create(
        apply_fn=MLP().apply,
        params=init_params(features["x"]),
        tx=jaxspec.CrossShardOptimizer(optax.adam(LR)),
    )


def run_jaxspec(xs: np.ndarray, ys: np.ndarray, ipl: int) -> dict[str, float]:
    """Cold and warm ``train(steps=N)`` on a fresh model_dir; loops 2..k of the cold call."""

    def input_fn() -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        return (({"x": xs[i]}, ys[i]) for i in range(len(xs)))

    config = jaxspec.RunConfig(
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=NEVER,
        log_step_count_steps=NEVER,
    )
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="jaxspec_bench_") as model_dir:
        est = jaxspec.TPUEstimator(
            model_fn,
            model_dir=model_dir,
            config=config,
            use_tpu=True,
            train_batch_size=BATCH,
            init_fn=init_fn,
        )
        for name in ("cold", "warm"):
            clock = LoopClock()
            t0 = time.perf_counter()
            est.train(input_fn, hooks=[clock], steps=len(xs))
            out[name] = time.perf_counter() - t0
            if name == "cold":
                out["loops"] = (clock.times[-1] - clock.times[0]) * len(xs) / (len(xs) - ipl)
                out["loss"] = clock.losses[-1]
    return out


# -- driver ---------------------------------------------------------------------------------
def summary(times: list[float], steps: int, base: float | None) -> dict[str, Any]:
    med = statistics.median(times)
    row = {
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "steps_per_s": steps / med,
        "times_s": times,
    }
    if base is not None:
        row["ratio_vs_baseline"] = med / base
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000, help="training steps per timed call")
    ap.add_argument("--repeats", type=int, default=5, help="timed repetitions of each method")
    ap.add_argument("--iterations-per-loop", type=int, default=100)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "train_overhead.json"))
    args = ap.parse_args()
    ipl, steps = args.iterations_per_loop, args.steps
    if steps % ipl or steps < 2 * ipl:
        ap.error("--steps must be a multiple of --iterations-per-loop and at least twice it")

    xs, ys = digits_batches(steps, BATCH, SEED)
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    sharding = NamedSharding(mesh, P(None, AXIS))
    params0 = init_params(xs[0])
    state0 = jax.device_put((params0, optax.adam(LR).init(params0)), NamedSharding(mesh, P()))
    baseline = make_baseline(mesh)
    print(
        f"{jax.device_count()} {jax.devices()[0].platform} devices, {steps} steps x {BATCH} examples, "
        f"{ipl} steps per loop, {args.repeats} repeats"
    )

    run_baseline(baseline, state0, xs[: 2 * ipl], ys[: 2 * ipl], ipl, sharding)  # warm-up: compile
    run_jaxspec(xs[: 2 * ipl], ys[: 2 * ipl], ipl)  # warm-up: imports, orbax, jax caches
    times: dict[str, list[float]] = {"baseline": [], "cold": [], "warm": [], "loops": []}
    losses: dict[str, list[float]] = {"baseline": [], "jaxspec": []}
    for rep in range(args.repeats):
        t, loss = run_baseline(baseline, state0, xs, ys, ipl, sharding)
        times["baseline"].append(t)
        losses["baseline"].append(loss)
        js = run_jaxspec(xs, ys, ipl)
        for k in ("cold", "warm", "loops"):
            times[k].append(js[k])
        losses["jaxspec"].append(js["loss"])
        print(
            f"rep {rep}: baseline {t:.3f}s  jaxspec cold {js['cold']:.3f}s warm {js['warm']:.3f}s "
            f"loops {js['loops']:.3f}s"
        )

    base = statistics.median(times["baseline"])
    rows = {"baseline": summary(times["baseline"], steps, None)}
    rows.update({f"jaxspec_{k}": summary(times[k], steps, base) for k in ("cold", "warm", "loops")})
    print(f"\n{'method':<16}{'median s':>10}{'min s':>9}{'max s':>9}{'steps/s':>10}{'x base':>8}")
    for name, r in rows.items():
        ratio = f"{r['ratio_vs_baseline']:.2f}" if "ratio_vs_baseline" in r else "1.00"
        print(
            f"{name:<16}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}"
            f"{r['steps_per_s']:>10.0f}{ratio:>8}"
        )
    diff = max(abs(a - b) for a, b in zip(losses["baseline"], losses["jaxspec"], strict=True))
    print(
        f"\nfinal loss (step {steps}): baseline {losses['baseline'][0]:.6f}  jaxspec {losses['jaxspec'][0]:.6f}"
        f"  max |diff| over repeats {diff:.2e}"
    )

    result = {
        "config": {
            "steps": steps,
            "repeats": args.repeats,
            "iterations_per_loop": ipl,
            "global_batch": BATCH,
            "devices": jax.device_count(),
            "platform": jax.devices()[0].platform,
            "jax": jax.__version__,
            "jaxspec": jaxspec.__version__,
        },
        "methods": rows,
        "final_loss": {**losses, "max_abs_diff": diff},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
