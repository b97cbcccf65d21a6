"""Cold start: the first ``train()`` of a new process on an existing model_dir, against a warm call.

For each Estimator kind (``--kinds``) and each compilation-cache setting (``--cache``):

1. a first process (``trainer``) trains the digits MLP (64-128-10, adam 1e-2, batch 128)
   for ``--steps`` steps on a fresh model_dir and exits, leaving a checkpoint (and, when
   a persistent compilation cache is on, its entries);
2. then ``--repeats`` times, a new process (``resume``) builds the same Estimator on that
   model_dir and calls ``train(steps=--steps)`` twice: ``first`` is the whole first call
   (restore, trace, compile or fetch from the cache, the steps, the final checkpoint),
   ``warm`` the second call in the same process. ``first / warm`` is the cold-start cost
   (the issue's goal: <= 2).

Each process times its calls itself and prints them as JSON; it also listens to JAX's
``jax.monitoring`` events to tell what XLA did during each call: executables obtained
(``/jax/core/compile/backend_compile_duration``: a compile, or a fetch from the
persistent cache), how many of those were persistent-cache hits
(``/jax/compilation_cache/cache_hits``), so ``xla_compiles`` = executables - hits is the
number of real XLA compilations, and the seconds spent compiling/fetching, tracing
(``jaxpr_trace_duration``) and lowering to MLIR. ``skipped`` in the table means the
first call of every resume process compiled nothing (every executable came from the
cache, or was not needed).

Kinds: ``plain`` = ``jaxspec.Estimator`` (one step per dispatch); ``scan`` =
``TPUEstimator(use_tpu=False, iterations_per_loop=100)``; ``mesh`` =
``TPUEstimator(use_tpu=True, iterations_per_loop=100)`` over every device
(``CrossShardOptimizer``). Cache settings: ``jaxspec`` = the environment without JAX's
cache variables (``JAX_COMPILATION_CACHE_DIR``, ``JAX_ENABLE_COMPILATION_CACHE``,
``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``, ``..._MIN_ENTRY_SIZE_BYTES``): whatever
jaxspec does by default; ``jax`` = JAX's own persistent cache switched on by its
environment variables, in a fresh directory per kind, with no minimum compile time
(what a user can do without jaxspec's help). RunConfig has no periodic checkpoints, summaries or step logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# 8 virtual devices when the CPU is the backend and nothing else was asked for (the mesh
# kind); JAXSPEC_BENCH_HOST_DEVICES=0 leaves XLA_FLAGS alone. The child processes inherit
# the setting. On a GPU or TPU, jax.devices() are the accelerators either way.
if os.environ.get(
    "JAXSPEC_BENCH_HOST_DEVICES", "8"
) != "0" and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + " --xla_force_host_platform_device_count="
        + os.environ.get("JAXSPEC_BENCH_HOST_DEVICES", "8")
    ).strip()

# This checkout's jaxspec, not whichever one is installed (an editable install of another tree).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("plain", "scan", "mesh")
CACHES = ("jaxspec", "jax")
JAX_CACHE_ENV = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_ENABLE_COMPILATION_CACHE",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
)
RESULT_TAG = "COLD_START_RESULT "
SEED = 0
IPL = 100


# -- the child: one process, timed calls ---------------------------------------------------------
def make_estimator(kind: str, model_dir: str, counter: Any) -> Any:
    """The Estimator of ``kind`` on ``model_dir``, with ``counter`` as model_fn."""
    from _common import QUIET_CONFIG, mlp_state

    import jaxspec

    if kind == "plain":
        config = jaxspec.RunConfig(**QUIET_CONFIG)
        return jaxspec.Estimator(counter, model_dir=model_dir, config=config, init_fn=lambda: mlp_state(SEED))
    config = jaxspec.RunConfig(tpu_config=jaxspec.TPUConfig(iterations_per_loop=IPL), **QUIET_CONFIG)
    return jaxspec.TPUEstimator(
        counter,
        model_dir=model_dir,
        config=config,
        use_tpu=kind == "mesh",
        train_batch_size=128,
        init_fn=lambda: mlp_state(SEED, cross_shard=kind == "mesh"),
    )


def child(args: argparse.Namespace) -> None:
    """Run ``train(steps=N)`` once (role ``trainer``) or twice (role ``resume``) and print
    the timings as one JSON line after RESULT_TAG."""
    import logging

    import jax
    from _common import MLP_BATCH, CompileEvents, CountingModelFn, digits_batches

    import jaxspec

    startup_s = time.time() - args.launched_at  # interpreter start and imports, until here
    logging.getLogger("jaxspec").setLevel(logging.WARNING)
    events = CompileEvents()
    xs, ys = digits_batches(args.steps, MLP_BATCH, SEED)
    counter = CountingModelFn(jaxspec.EstimatorSpec if args.kind == "plain" else jaxspec.TPUEstimatorSpec)
    t0 = time.perf_counter()
    est = make_estimator(args.kind, args.model_dir, counter)
    construct_s = time.perf_counter() - t0
    calls = []
    for _ in range(1 if args.child == "trainer" else 2):
        events.reset()
        before = counter.calls
        t0 = time.perf_counter()
        est.train(lambda: (({"x": xs[i]}, ys[i]) for i in range(len(xs))), steps=args.steps)
        seconds = time.perf_counter() - t0
        calls.append({"s": seconds, "model_fn_calls": counter.calls - before, **events.summary()})
    result = {
        "role": args.child,
        "kind": args.kind,
        "devices": jax.device_count(),
        "platform": jax.devices()[0].platform,
        "startup_s": startup_s,
        "construct_s": construct_s,
        "calls": calls,
        "global_step": int(est.get_variable_value("global_step")),
        "jax_compilation_cache_dir": getattr(jax.config, "jax_compilation_cache_dir", None),
    }
    print(RESULT_TAG + json.dumps(result, default=float), flush=True)


# -- the parent: processes and the table ---------------------------------------------------------
def run_child(role: str, kind: str, model_dir: str, steps: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", role]
    cmd += [
        "--kind",
        kind,
        "--model-dir",
        model_dir,
        "--steps",
        str(steps),
        "--launched-at",
        repr(time.time()),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode or not lines:
        raise RuntimeError(f"{role} {kind} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return {**json.loads(lines[-1][len(RESULT_TAG) :]), "process_wall_s": wall}


def child_env(cache: str, cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in JAX_CACHE_ENV}
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    if cache == "jax":
        env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return env


def measure(kind: str, cache: str, steps: int, repeats: int) -> dict[str, Any]:
    """One trainer process, then ``repeats`` resume processes on its model_dir."""
    root = tempfile.mkdtemp(prefix=f"jaxspec_cold_{kind}_{cache}_")
    try:
        env = child_env(cache, os.path.join(root, "jax_cache"))
        model_dir = os.path.join(root, "model")
        trainer = run_child("trainer", kind, model_dir, steps, env)
        resumes = []
        for rep in range(repeats):
            r = run_child("resume", kind, model_dir, steps, env)
            first, warm = r["calls"]
            print(
                f"  {kind}/{cache} rep {rep}: first call {first['s']:.3f}s ({first['xla_compiles']} XLA compiles, "
                f"{first['compile_s']:.2f}s; {first['cache_hits']} cache hits)  warm call {warm['s']:.3f}s  "
                f"process {r['process_wall_s']:.1f}s"
            )
            resumes.append(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    firsts = [r["calls"][0]["s"] for r in resumes]
    warms = [r["calls"][1]["s"] for r in resumes]
    first, warm = statistics.median(firsts), statistics.median(warms)
    return {
        "kind": kind,
        "cache": cache,
        "trainer": trainer,
        "resumes": resumes,
        "first_median_s": first,
        "warm_median_s": warm,
        "first_over_warm": first / warm,
        "first_xla_compiles": [r["calls"][0]["xla_compiles"] for r in resumes],
        "first_cache_hits": [r["calls"][0]["cache_hits"] for r in resumes],
        "compile_skipped": all(r["calls"][0]["xla_compiles"] == 0 for r in resumes),
        "goal_first_over_warm_le_2": first / warm <= 2.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {KINDS}")
    ap.add_argument("--cache", default=",".join(CACHES), help=f"comma-separated, of {CACHES}")
    ap.add_argument("--steps", type=int, default=100, help="steps per train() call (a multiple of 100)")
    ap.add_argument("--repeats", type=int, default=3, help="resume processes per kind and cache setting")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "cold_start.json"))
    ap.add_argument("--child", choices=("trainer", "resume"), help=argparse.SUPPRESS)
    ap.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--launched-at", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    kinds = [k for k in args.kinds.split(",") if k]
    caches = [c for c in args.cache.split(",") if c]
    if set(kinds) - set(KINDS) or set(caches) - set(CACHES):
        ap.error(f"--kinds takes {KINDS}, --cache takes {CACHES}")
    if args.steps % IPL:
        ap.error(f"--steps must be a multiple of {IPL} (iterations_per_loop of the scan and mesh kinds)")

    rows = []
    for kind in kinds:
        for cache in caches:
            rows.append(measure(kind, cache, args.steps, args.repeats))
    r0 = rows[0]["resumes"][0]
    print(
        f"\n{r0['devices']} {r0['platform']} devices, train(steps={args.steps}), {args.repeats} resume processes each"
    )
    head = f"{'kind':<7}{'cache':<9}{'trainer s':>10}{'first s':>9}{'warm s':>8}{'first/warm':>11}"
    print(head + f"{'XLA compiles (first)':>22}{'compile s':>10}{'skipped':>9}{'startup s':>10}")
    for r in rows:
        first_calls = [x["calls"][0] for x in r["resumes"]]
        compile_s = statistics.median(c["compile_s"] for c in first_calls)
        startup_s = statistics.median(x["startup_s"] for x in r["resumes"])
        print(
            f"{r['kind']:<7}{r['cache']:<9}{r['trainer']['calls'][0]['s']:>10.3f}{r['first_median_s']:>9.3f}"
            f"{r['warm_median_s']:>8.3f}{r['first_over_warm']:>11.2f}{str(r['first_xla_compiles']):>22}"
            f"{compile_s:>10.2f}{'yes' if r['compile_skipped'] else 'no':>9}{startup_s:>10.1f}"
        )
    print("goal: first/warm <= 2 and no XLA compile in the first call of a new process")

    import jax

    import jaxspec

    result = {
        "config": {
            "steps": args.steps,
            "repeats": args.repeats,
            "kinds": kinds,
            "cache": caches,
            "iterations_per_loop": IPL,
            "jax": jax.__version__,
            "jaxspec": jaxspec.__version__,
            "jaxspec_path": os.path.dirname(jaxspec.__file__),
            "devices": r0["devices"],
            "platform": r0["platform"],
        },
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
