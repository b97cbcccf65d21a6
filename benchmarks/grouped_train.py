"""A plain ``jaxspec.Estimator`` with step grouping against hand-written JAX loops.

The digits MLP (64-128-10, adam 1e-2, batch 128) on one device; every section times
whole warm ``train(steps=N)`` calls (restore from memory, N steps, the final Orbax
checkpoint) against a hand-written loop measured in the same run, repetitions
alternating; ``ratio`` = jaxspec throughput / baseline throughput (medians).

* ``default``: tf.estimator's default RunConfig (loss summary and step log every 100
  steps, a checkpoint every 600 s), no user hooks, ``train(steps=5000)``, against
  ``jax.jit`` of a ``lax.scan`` over 100 steps per dispatch that saves its final state
  once with Orbax (goal >= 0.95).
* ``default_ungrouped``: the same with ``RunConfig(steps_per_execution=1)`` (one step
  per dispatch, as before grouping), against the same baseline: for reference.
* ``every_step_hook``: no periodic work, a user SessionRunHook that fetches the loss at
  every step (so every step is its own run), ``train(steps=1000)``, against a loop of
  one ``jax.jit`` step per dispatch that reads the loss after each step (goal >= 0.8).

The parameters after jaxspec's first call (from its checkpoint) are compared with the
hand loop's from the same initial state on the same batches; the script exits non-zero
when they differ by more than 1e-5. Results go to ``results/grouped_train.json``. On a
shared machine rerun before trusting a small difference; on a GPU it runs unchanged.
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
import numpy as np  # noqa: E402
import optax  # noqa: E402
from _common import (  # noqa: E402
    MLP_BATCH,
    QUIET_CONFIG,
    CountingModelFn,
    OrbaxFinalSave,
    digits_batches,
    hand_train_step,
    mlp_params,
    mlp_state,
    time_summary,
    write_json,
)
from call_overhead import checkpoint_params, hand_scan_loop, params_diff  # noqa: E402

import jaxspec  # noqa: E402

SEED = 0
GOALS = {"default": 0.95, "every_step_hook": 0.8}


class EveryStepLoss(jaxspec.SessionRunHook):
    """A user hook without ``next_required_step``: it runs every step, reading the loss."""

    def __init__(self) -> None:
        self.last = float("nan")

    def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
        return jaxspec.SessionRunArgs("loss")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.last = float(run_values.results)


def _input(xs: np.ndarray, ys: np.ndarray) -> Any:
    return lambda: (({"x": xs[i]}, ys[i]) for i in range(len(xs)))


def _scan_baseline(xs: np.ndarray, ys: np.ndarray, ipl: int, model_dir: str) -> Any:
    loop, params0 = hand_scan_loop(), mlp_params(SEED)
    opt0, device = optax.adam(1e-2).init(params0), jax.devices()[0]
    save = OrbaxFinalSave(os.path.join(model_dir, "hand_checkpoints"))

    def hand() -> tuple[float, Any]:
        t0 = time.perf_counter()
        params, opt = params0, opt0
        for i in range(0, len(xs), ipl):
            x, y = jax.device_put(xs[i : i + ipl], device), jax.device_put(ys[i : i + ipl], device)
            params, opt, losses = loop(params, opt, x, y)
        float(np.asarray(losses)[-1])
        save({"params": params, "opt_state": opt})
        return time.perf_counter() - t0, params

    return hand


def _step_baseline(xs: np.ndarray, ys: np.ndarray) -> Any:
    step, params0 = hand_train_step(), mlp_params(SEED)
    opt0 = optax.adam(1e-2).init(params0)

    def hand() -> tuple[float, Any]:
        t0 = time.perf_counter()
        params, opt = params0, opt0
        for i in range(len(xs)):
            params, opt, loss = step(params, opt, xs[i], ys[i])
            float(loss)  # read every step
        return time.perf_counter() - t0, params

    return hand


def section(name: str, args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    steps = args.steps if name != "every_step_hook" else args.hook_steps
    xs, ys = digits_batches(steps, args.batch, SEED)
    if name == "every_step_hook":
        config, hooks, hand = jaxspec.RunConfig(**QUIET_CONFIG), [EveryStepLoss()], _step_baseline(xs, ys)
    else:
        spe = 1 if name == "default_ungrouped" else "auto"
        config, hooks = jaxspec.RunConfig(steps_per_execution=spe), None
        hand = _scan_baseline(xs, ys, args.iterations_per_loop, model_dir)
    est = jaxspec.Estimator(
        CountingModelFn(jaxspec.EstimatorSpec),
        model_dir=model_dir,
        config=config,
        init_fn=lambda: mlp_state(SEED),
    )
    _, hand_params = hand()  # compile, touch the batches
    t0 = time.perf_counter()
    est.train(_input(xs, ys), hooks=hooks, steps=steps)
    first_s = time.perf_counter() - t0
    diff = params_diff(hand_params, checkpoint_params(est))
    hand_t, js_t = [], []
    for rep in range(args.repeats):
        hand_t.append(hand()[0])
        t0 = time.perf_counter()
        est.train(_input(xs, ys), hooks=hooks, steps=steps)
        js_t.append(time.perf_counter() - t0)
        print(f"  {name} rep {rep}: baseline {hand_t[-1]:.3f}s  jaxspec warm call {js_t[-1]:.3f}s")
    base = statistics.median(hand_t)
    row = time_summary(js_t, steps, "steps", base)
    return {
        "steps": steps,
        "baseline": time_summary(hand_t, steps, "steps"),
        "jaxspec_warm": row,
        "ratio": row["ratio_vs_baseline"],
        "first_call_s": first_s,
        "final_params_max_abs_diff": diff,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="default,default_ungrouped,every_step_hook")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=MLP_BATCH)
    ap.add_argument("--steps", type=int, default=5000, help="steps of the default sections")
    ap.add_argument("--hook-steps", type=int, default=1000, help="steps of every_step_hook")
    ap.add_argument("--iterations-per-loop", type=int, default=100, help="the hand scan's steps per dispatch")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "grouped_train.json"))
    args = ap.parse_args()
    logging.getLogger("jaxspec").setLevel(logging.WARNING)
    print(f"{jax.devices()[0].platform} device; {args.repeats} repeats")
    sections = {}
    for name in [s for s in args.only.split(",") if s]:
        print(f"[{name}]")
        with tempfile.TemporaryDirectory(prefix=f"jaxspec_grouped_{name}_") as model_dir:
            sections[name] = section(name, args, model_dir)
    print(f"\n{'section':<20}{'baseline s':>12}{'jaxspec s':>12}{'ratio':>8}{'goal':>8}  params diff")
    for name, s in sections.items():
        goal = GOALS.get(name)
        print(
            f"{name:<20}{s['baseline']['median_s']:>12.3f}{s['jaxspec_warm']['median_s']:>12.3f}"
            f"{s['ratio']:>8.2f}{'' if goal is None else f'>= {goal}':>8}  {s['final_params_max_abs_diff']:.1e}"
        )
    write_json(
        args.out,
        {
            "config": {**vars(args), "platform": jax.devices()[0].platform, "jax": jax.__version__},
            "sections": sections,
            "goals": {
                k: {"target": v, "value": sections[k]["ratio"]} for k, v in GOALS.items() if k in sections
            },
        },
    )
    bad = {
        k: s["final_params_max_abs_diff"]
        for k, s in sections.items()
        if not s["final_params_max_abs_diff"] <= 1e-5
    }
    if bad:
        raise SystemExit(f"jaxspec and the hand loop did not compute the same parameters: {bad}")


if __name__ == "__main__":
    main()
