"""Model parallelism: per-device state bytes and training steps/s of ``TPUEstimator`` with
``num_cores_per_replica`` = k, against a hand-written loop with the same shardings.

The model is an MLP of four 1024-wide layers (``--width``) on the digits (64 -> w -> w ->
w -> w -> 10, tanh, adam 1e-3, softmax cross entropy), global batch 128, laid out
Megatron-style by ``partition_rules``: layers 0 and 2 split their kernel's columns (and
bias) over ``'core'``, layers 1 and 3 their kernel's rows; the 10-wide output layer is
replicated (over 99 % of the state is split). For every k in 1, 2, 4, 8 that divides the
device count (of the default backend: CPU, GPU or TPU unchanged):

* ``jaxspec``: ``TPUEstimator(use_tpu=True)`` with ``TPUConfig(num_cores_per_replica=k)``;
  steps/s from the end of its first loop to the end of its last (a SessionRunHook), i.e.
  the steady per-loop rate without compilation, state creation or checkpoints;
* ``baseline``: ``jax.jit(jax.shard_map(lax.scan(step), axis_names={'replica'}))`` written
  by hand on the same ``('replica', 'core')`` mesh, the state placed with the same
  NamedShardings, gradients ``pmean``-ed over ``'replica'``; the same pre-generated batches,
  one host->device put and one dispatch per loop, compiled in a warm-up.

Reported per k: the state's bytes on one device (sum of device 0's shards), the compiled
train loop's per-device argument bytes (``memory_analysis()``), steps/s of both, and
``ratio`` = jaxspec steps/s / baseline steps/s (median of ``--repeats``; goal >= 0.97).
The final losses of the two must agree (same math and data). On a CPU-only machine the
"devices" are threads sharing the host's cores: the figures show the cost of the layout
and of the framework, not accelerator scaling.

    .venv/bin/python benchmarks/model_parallel.py [--steps 200 --ipl 50 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import LoopClock, digits_batches  # benchmarks/ is on sys.path when run
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxspec
from jaxspec.engine.partitioning import state_shardings

BATCH = 128
LR = 1e-3
NEVER = 10**9
RULES = [
    (r"Dense_[02]/kernel", P(None, "core")),
    (r"Dense_[02]/bias", P("core")),
    (r"Dense_[13]/kernel", P("core", None)),
]


class WideMlp(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(4):
            x = nn.tanh(nn.Dense(self.width)(x))
        return nn.Dense(10)(x)


def _init_fn(width: int) -> Any:
    def init_fn(features: Any) -> train_state.TrainState:
        module = WideMlp(width)
        params = module.init(jax.random.PRNGKey(0), features["x"][:1])
        return train_state.TrainState.create(
            apply_fn=module.apply, params=params, tx=jaxspec.CrossShardOptimizer(optax.adam(LR))
        )

    return init_fn


def _loss(state: Any, p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn(p, x), y).mean()


def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.TPUEstimatorSpec:
    loss, grads = jax.value_and_grad(lambda p: _loss(state, p, features["x"], labels))(state.params)
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def _device0_bytes(state: Any) -> int:
    """Bytes of the state on the first device (its shard of every leaf)."""
    dev = jax.devices()[0]
    return sum(
        s.data.nbytes for leaf in jax.tree.leaves(state) for s in leaf.addressable_shards if s.device == dev
    )


class _StateKeeper(jaxspec.SessionRunHook):
    def end(self, session: Any) -> None:
        self.state = session.state


def run_jaxspec(k: int, width: int, xs: np.ndarray, ys: np.ndarray, ipl: int) -> dict[str, Any]:
    steps = len(xs)

    def input_fn(params: dict[str, Any]) -> Any:
        b = params["batch_size"]  # PER_HOST_V1 on one process: the global batch
        return (({"x": xs[i, :b]}, ys[i, :b]) for i in range(steps))

    config = jaxspec.RunConfig(
        model_dir=tempfile.mkdtemp(prefix="jaxspec_mp_"),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=NEVER,
        log_step_count_steps=NEVER,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl, num_cores_per_replica=k),
    )
    est = jaxspec.TPUEstimator(
        model_fn,
        config=config,
        params={},
        train_batch_size=BATCH,
        init_fn=_init_fn(width),
        partition_rules=RULES,
    )
    clock, keeper = LoopClock(), _StateKeeper()
    est.train(input_fn, steps=steps, hooks=[clock, keeper])
    (compiled,) = est._compile_cache.modes["train"].compiled.values()
    return {
        "steps_per_s": (steps - ipl) / (clock.times[-1] - clock.times[0]),
        "final_loss": clock.losses[-1],
        "state_bytes_device0": _device0_bytes(keeper.state),
        "argument_bytes": compiled.memory_analysis().argument_size_in_bytes,
    }


def run_baseline(k: int, width: int, xs: np.ndarray, ys: np.ndarray, ipl: int) -> dict[str, Any]:
    devices = np.array(jax.devices())
    mesh = Mesh(devices.reshape(len(devices) // k, k), ("replica", "core"))
    state = _init_fn(width)({"x": xs[0]})
    shapes = jax.eval_shape(lambda: state)
    shardings = (
        state_shardings(shapes, RULES, mesh)
        if k > 1
        else jax.tree.map(lambda _: NamedSharding(mesh, P()), shapes)
    )
    state = jax.device_put(state, shardings)
    batch = NamedSharding(mesh, P(None, "replica"))

    def loop(st: Any, x: jax.Array, y: jax.Array) -> Any:
        def body(st: Any, xy: Any) -> Any:
            loss, grads = jax.value_and_grad(lambda p: _loss(st, p, *xy))(st.params)
            return st.apply_gradients(grads=grads), loss

        st, losses = jax.lax.scan(body, st, (x, y))
        # (a collective over a 1-member manual axis is refused by XLA: k = all devices)
        return st, losses if len(devices) == k else jax.lax.pmean(losses, "replica")

    sharded = jax.shard_map(
        loop,
        mesh=mesh,
        in_specs=(P(), P(None, "replica"), P(None, "replica")),
        out_specs=(P(), P()),
        axis_names={"replica"},
        check_vma=False,
    )
    step = jax.jit(sharded, out_shardings=(shardings, None), donate_argnums=0)
    chunks = [(xs[s : s + ipl], ys[s : s + ipl]) for s in range(0, len(xs), ipl)]
    fresh = jax.tree.map(jnp.copy, state)  # the warm-up's state (donated)
    warm, _ = step(fresh, *jax.device_put(chunks[0], batch))
    jax.block_until_ready(warm)
    t0, losses = time.perf_counter(), None
    for i, chunk in enumerate(chunks):
        state, losses = step(state, *jax.device_put(chunk, batch))
        if i == 0:
            jax.block_until_ready(losses)
            t0 = time.perf_counter()  # as jaxspec: from the end of the first loop
    final = float(np.asarray(losses)[-1])
    return {"steps_per_s": (len(xs) - ipl) / (time.perf_counter() - t0), "final_loss": final}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ipl", type=int, default=50, help="iterations_per_loop (steps divisible by it)")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "model_parallel.json"))
    args = ap.parse_args()
    n = jax.device_count()
    xs, ys = digits_batches(args.steps, BATCH)
    rows = []
    for k in [k for k in (1, 2, 4, 8) if n % k == 0 and (n // k) and BATCH % (n // k) == 0]:
        runs = [
            (run_jaxspec(k, args.width, xs, ys, args.ipl), run_baseline(k, args.width, xs, ys, args.ipl))
            for _ in range(args.repeats)
        ]
        ours = statistics.median(r[0]["steps_per_s"] for r in runs)
        base = statistics.median(r[1]["steps_per_s"] for r in runs)
        row = {
            "k": k,
            "mesh": [n // k, k],
            "state_bytes_device0": runs[0][0]["state_bytes_device0"],
            "argument_bytes": runs[0][0]["argument_bytes"],
            "jaxspec_steps_per_s": ours,
            "baseline_steps_per_s": base,
            "ratio": ours / base,
            "final_loss": [runs[0][0]["final_loss"], runs[0][1]["final_loss"]],
            "jaxspec_runs": [r[0]["steps_per_s"] for r in runs],
            "baseline_runs": [r[1]["steps_per_s"] for r in runs],
        }
        rows.append(row)
        print(
            f"k={k} mesh={n // k}x{k}: state/device {row['state_bytes_device0'] / 2**20:.2f} MiB, "
            f"args/device {row['argument_bytes'] / 2**20:.2f} MiB, jaxspec {ours:.2f} steps/s, "
            f"baseline {base:.2f} steps/s, ratio {ours / base:.3f}, final losses {row['final_loss']}",
            flush=True,
        )
    result = {
        "platform": jax.devices()[0].platform,
        "device_kind": jax.devices()[0].device_kind,
        "devices": n,
        "width": args.width,
        "steps": args.steps,
        "iterations_per_loop": args.ipl,
        "batch": BATCH,
        "jax": jax.__version__,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
