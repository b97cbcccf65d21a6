"""Training steps/s of ``jaxspec.TPUEstimator`` on 1, 2, 4 and 8 devices and on 2 processes x 4.

The digits MLP of ``examples/digits.py`` (Dense(128)-relu-Dense(64)-relu-Dense(10),
``CrossShardOptimizer(adam 1e-2)``, softmax cross entropy) is trained by
``TPUEstimator(use_tpu=True)`` with ``TPUConfig(num_shards=n, iterations_per_loop=100)``
on the same global batch (128 examples, split over the replicas) in every configuration:

* ``1``, ``2``, ``4``, ``8``: one process with n devices;
* ``2x4``: two processes of 4 devices each, joined through ``TF_CONFIG`` (chief + worker
  on free ports of 127.0.0.1, gloo CPU collectives), each feeding its half of every
  global batch (PER_HOST_V1).

The device count (``XLA_FLAGS``) must be fixed before JAX starts, so each configuration
runs in its own subprocess: this script re-invokes itself with ``--worker``, and the
worker writes its timings as JSON to a file the parent names. In a worker a warm-up
``train()`` compiles and writes the first checkpoint; then ``--repeats`` timed
``train(steps=N)`` calls run on the same estimator, each timed two ways:

* ``call``: the whole ``train()`` call (restore, trace and compile of the loop, the loops,
  the final checkpoint);
* ``loops``: end of the first loop to end of the last (a SessionRunHook), scaled to N
  steps: the steady per-loop rate.

On a CPU-only machine the "devices" are threads sharing the host's cores (two here), so
more devices bring no speed-up: the figures show the cost of sharding and of the
cross-process collectives (overhead), not scaling. On a GPU or TPU machine with enough
accelerators the same script shows scaling (a configuration that needs more devices
than there are is reported as failed). The final losses of all configurations must agree
(same global batches, same math).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BATCH = 128
LR = 1e-2
SEED = 0
NEVER = 10**9  # save_summary_steps / log_step_count_steps that never fire
#: (name, devices in all, processes); each process gets devices // processes.
CONFIGS = [("1", 1, 1), ("2", 2, 1), ("4", 4, 1), ("8", 8, 1), ("2x4", 8, 2)]


# -- worker: one configuration in this process ----------------------------------------------
def worker(devices: int, steps: int, repeats: int, ipl: int, model_dir: str, out: str) -> None:
    """Train in this process (one of ``jax.process_count()``) and write the timings to ``out``."""
    import flax.linen as nn
    import jax
    import numpy as np
    import optax
    from flax.training import train_state
    from sklearn.datasets import load_digits

    import jaxspec

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.Dense(10)(nn.relu(nn.Dense(64)(nn.relu(nn.Dense(128)(x)))))

    def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.TPUEstimatorSpec:
        def loss_of(p: Any) -> jax.Array:
            logits = state.apply_fn(p, features["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_of)(state.params)
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))

    def init_fn(rng: jax.Array, features: Any) -> train_state.TrainState:
        params = jax.jit(MLP().init)(rng, features["x"][:1])  # one compile, not one per eager op
        return train_state.TrainState.create(
            apply_fn=MLP().apply, params=params, tx=jaxspec.CrossShardOptimizer(optax.adam(LR))
        )

    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    rng = np.random.RandomState(SEED)  # shuffled epochs, cut into global batches
    order = np.concatenate([rng.permutation(len(x)) for _ in range(steps * BATCH // len(x) + 1)])[
        : steps * BATCH
    ]
    xs, ys = x[order].reshape(steps, BATCH, -1), y[order].reshape(steps, BATCH)

    def input_fn(params: dict[str, Any]) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        """Global batch k, this host's rows of it (params['batch_size'] is the per-host batch)."""
        b, host = params["batch_size"], params["context"].current_host
        return (
            ({"x": xs[k, host * b : (host + 1) * b]}, ys[k, host * b : (host + 1) * b]) for k in range(steps)
        )

    class LoopClock(jaxspec.SessionRunHook):
        """The time at the end of every loop (fetching the loss waits for the device)."""

        def __init__(self) -> None:
            self.times: list[float] = []
            self.loss = float("nan")

        def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
            return jaxspec.SessionRunArgs("loss")

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.times.append(time.perf_counter())
            self.loss = float(run_values.results)

    config = jaxspec.RunConfig(
        model_dir=model_dir,
        tf_random_seed=SEED,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=NEVER,
        log_step_count_steps=NEVER,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl, num_shards=devices),
    )
    est = jaxspec.TPUEstimator(
        model_fn, config=config, params={}, use_tpu=True, train_batch_size=BATCH, init_fn=init_fn
    )
    t0 = time.perf_counter()
    est.train(input_fn, steps=ipl)  # warm-up: one loop (compile, state init, first checkpoint)
    warmup = time.perf_counter() - t0
    calls, loops, losses = [], [], []
    for _ in range(repeats):
        clock = LoopClock()
        t0 = time.perf_counter()
        est.train(input_fn, hooks=[clock], steps=steps)
        calls.append(time.perf_counter() - t0)
        loops.append((clock.times[-1] - clock.times[0]) * steps / (steps - ipl))
        losses.append(clock.loss)
    result = {
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "replicas": devices,
        "platform": jax.devices()[0].platform,
        "warmup_s": warmup,
        "call_s": calls,
        "loops_s": loops,
        "final_loss": losses,
        "jax": jax.__version__,
    }
    Path(out).write_text(json.dumps(result) + "\n")


# -- parent: one subprocess per configuration -----------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(devices: int, processes: int, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """Launch ``processes`` workers of ``devices // processes`` CPU devices; process 0's result."""
    with tempfile.TemporaryDirectory(prefix="jaxspec_scaling_") as tmp:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices // processes}")
        env.pop("TF_CONFIG", None)
        ports = [_free_port() for _ in range(processes)]  # 127.0.0.1 only
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
        procs = []
        for p in range(processes):
            if processes > 1:
                task = {"type": "chief", "index": 0} if p == 0 else {"type": "worker", "index": p - 1}
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
            out = os.path.join(tmp, f"process{p}.json")
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--devices",
                str(devices),
                "--steps",
                str(args.steps),
                "--repeats",
                str(args.repeats),
                "--iterations-per-loop",
                str(args.iterations_per_loop),
                "--model-dir",
                os.path.join(tmp, "model"),
                "--out",
                out,
            ]
            procs.append(
                (
                    subprocess.Popen(
                        cmd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                    ),
                    out,
                )
            )
        results, failure = [], None
        for proc, out in procs:
            try:
                log, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                log, _ = proc.communicate()
                failure = failure or f"timed out after {timeout:.0f}s: {log[-2000:]}"
                continue
            if proc.returncode != 0 or not os.path.exists(out):
                failure = failure or f"exit {proc.returncode}: {log[-2000:]}"
                continue
            results.append(json.loads(Path(out).read_text()))
        if failure:
            return {"error": failure}
        return min(results, key=lambda r: r["process"])


def summary(times: list[float], steps: int) -> dict[str, Any]:
    med = statistics.median(times)
    return {
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "steps_per_s": steps / med,
        "steps_per_s_min": steps / max(times),
        "steps_per_s_max": steps / min(times),
        "times_s": times,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps per timed train() call")
    ap.add_argument("--repeats", type=int, default=3, help="timed train() calls per configuration")
    ap.add_argument("--iterations-per-loop", type=int, default=100)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scaling.json"))
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS), help="subset, e.g. 1,8,2x4")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--devices", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ipl, steps = args.iterations_per_loop, args.steps
    if steps % ipl or steps < 2 * ipl or args.repeats < 1:
        ap.error("--steps must be a multiple of --iterations-per-loop and at least twice it; --repeats >= 1")
    if args.worker:
        worker(args.devices, steps, args.repeats, ipl, args.model_dir, args.out)
        return
    wanted = args.configs.split(",")
    configs = [c for c in CONFIGS if c[0] in wanted]
    if not configs:
        ap.error(f"--configs: none of {wanted} is one of {[c[0] for c in CONFIGS]}")

    print(f"{steps} steps x {BATCH} examples per timed train(), {ipl} steps per loop, {args.repeats} repeats")
    rows: dict[str, dict[str, Any]] = {}
    for name, devices, processes in configs:
        t0 = time.perf_counter()
        res = run_config(devices, processes, args, timeout=120 + 5 * args.repeats * steps / 100)
        row: dict[str, Any] = {"devices": devices, "processes": processes}
        if "error" in res:
            row["error"] = res["error"]
            print(f"config {name}: FAILED {res['error'][-600:]}")
        else:
            row.update(
                platform=res["platform"],
                warmup_s=res["warmup_s"],
                final_loss=res["final_loss"],
                call=summary(res["call_s"], steps),
                loops=summary(res["loops_s"], steps),
            )
            print(
                f"config {name}: {time.perf_counter() - t0:.1f}s wall, calls "
                + " ".join(f"{t:.2f}" for t in res["call_s"])
                + "s, loops "
                + " ".join(f"{t:.2f}" for t in res["loops_s"])
                + "s"
            )
        rows[name] = row

    ref = rows.get("1", {})
    for row in rows.values():
        for kind in ("call", "loops"):
            if kind in row and kind in ref:
                row[kind]["ratio_vs_1_device"] = row[kind]["steps_per_s"] / ref[kind]["steps_per_s"]
    print(
        f"\n{'config':<8}{'devices':>8}{'procs':>6}{'loops steps/s (min-max)':>26}{'x 1dev':>8}"
        f"{'call steps/s (min-max)':>25}{'x 1dev':>8}"
    )
    for name, row in rows.items():
        line = f"{name:<8}{row['devices']:>8}{row['processes']:>6}"
        if "error" in row:
            print(line + "   failed")
            continue
        for kind, width in (("loops", 26), ("call", 25)):
            s = row[kind]
            cell = f"{s['steps_per_s']:.0f} ({s['steps_per_s_min']:.0f}-{s['steps_per_s_max']:.0f})"
            ratio = s.get("ratio_vs_1_device")
            line += f"{cell:>{width}}" + (f"{ratio:>8.3f}" if ratio is not None else f"{'-':>8}")
        print(line)

    ok = [r for r in rows.values() if "final_loss" in r]
    diff = max(
        (abs(a - b) for r in ok for a, b in zip(r["final_loss"], ok[0]["final_loss"], strict=True)),
        default=0.0,
    )
    if ok:
        print(
            f"\nfinal loss (step {ipl + args.repeats * steps}): "
            + "  ".join(f"{n} {r['final_loss'][-1]:.6g}" for n, r in rows.items() if "final_loss" in r)
            + f"  max |diff| {diff:.1e} (same batches and math: should be ~1e-6 or less)"
        )

    result = {
        "config": {
            "steps": steps,
            "repeats": args.repeats,
            "iterations_per_loop": ipl,
            "global_batch": BATCH,
            "cpu_count": os.cpu_count(),
        },
        "configs": rows,
        "final_loss_max_abs_diff": diff,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
