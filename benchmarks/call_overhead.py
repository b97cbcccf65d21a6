"""Per-call cost of jaxspec's Estimators: whole warm calls against hand-written JAX loops.

Every section times jaxspec through its public API against a hand-written baseline
measured in the same run, repetitions alternating baseline and jaxspec; the table gives
medians and ``ratio`` = jaxspec throughput / baseline throughput (1.0 = no overhead).
"Warm" means the Estimator has already run the same call once in this process (that
first call, with its tracing and compilation, is reported but not in the ratio).

* ``plain``: ``jaxspec.Estimator`` (RunConfig with no periodic checkpoints, summaries or
  step logs, so step grouping runs up to 1000 steps per loop; ``grouped_train.py``
  measures grouping against the issue's baselines) trains the digits MLP (64-128-10,
  adam 1e-2, batch 128): a whole warm ``train(steps=N)`` call (restore, N steps, the final
  checkpoint) against a loop that dispatches one ``jax.jit`` step at a time and reads the
  loss (``float``) after every step, as a hand loop that logs or checks NaN does.
* ``scan``: ``TPUEstimator(use_tpu=False, iterations_per_loop=100)``, the same MLP: a whole
  warm ``train(steps=N)`` call against ``jax.jit`` of a ``lax.scan`` over 100 steps on one
  device, one host->device put and one dispatch per 100 steps, the loss read at the end.
* ``evaluate``: a whole warm ``evaluate()`` call (64 x 512 = 32,768 examples, accuracy + auc
  + mean_per_class_accuracy, 16 steps per loop) against the hand-written loop of
  ``eval_metrics.py`` (whose pieces it reuses), on one device
  (``TPUEstimator(use_tpu=False)``); ``--eval-mesh`` runs both over every device
  (``use_tpu=True``), which is what ``eval_metrics.py`` measures.
* ``evaluate_plain``: the same evaluation through a plain ``jaxspec.Estimator`` (an
  ``EstimatorSpec`` with ``eval_metric_ops``, default ``steps_per_execution='auto'``: no
  hook needs a step, so the batches run grouped, up to 1000 per compiled loop) against
  the same hand loop on one device (its 16 batches per dispatch).
* ``predict``: ``--predict-calls`` calls of ``list(est.predict(input_fn))`` with one row on an
  Estimator trained for a few steps: milliseconds per call after the first (median), and
  how many times model_fn was called after the first call; the baseline is a warm
  ``jax.jit`` forward pass on the same row with the same parameters (result read back).

model_fn is wrapped to count its calls (each call is one trace), and a ``jax.monitoring``
listener records the seconds spent tracing and lowering and the XLA compiles (with
function names) of every warm call; the JSON gives them per call (``per_warm_call``).
The evaluate section's model_dir has no checkpoint (its state comes from init_fn, as in
``eval_metrics.py``). Both sides train/evaluate/predict the same thing:
the parameters after jaxspec's first call (read from its checkpoint) against the hand
loop's from the same initial state on the same batches, the metric values and the
predicted probabilities are compared and printed, and the script exits non-zero when
they differ by more than 1e-5. On CPU the
figures show framework overhead, not accelerator speed; on a shared machine rerun before
trusting a small difference.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# 8 virtual devices when the CPU is the backend and nothing else was asked for (the mesh
# of --eval-mesh); JAXSPEC_BENCH_HOST_DEVICES=0 leaves XLA_FLAGS alone. The flag only
# shapes the CPU backend: on a GPU or TPU, jax.devices() are the accelerators either way.
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

import jax
import numpy as np
import optax
from _common import (  # benchmarks/ is on sys.path when run
    MLP_BATCH,
    QUIET_CONFIG,
    CompileEvents,
    CountingModelFn,
    DigitsMLP,
    OrbaxFinalSave,
    digits_batches,
    hand_train_step,
    mlp_loss,
    mlp_params,
    mlp_state,
    time_summary,
    write_json,
)
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxspec

SEED = 0
SECTIONS = ("plain", "scan", "evaluate", "evaluate_plain", "predict")
GOALS = {  # the goals: (value key, comparison, target)
    "plain": ("ratio", ">=", 0.8),
    "scan": ("ratio", ">=", 0.95),
    "evaluate": ("ratio", ">=", 0.9),
    "evaluate_plain": ("ratio", ">=", 0.9),
    "predict": ("median_ms", "<=", 5.0),
    "predict_model_fn": ("model_fn_calls_after_first", "<=", 0),
}


def _train_input(xs: np.ndarray, ys: np.ndarray) -> Callable[[], Iterator[Any]]:
    return lambda: (({"x": xs[i]}, ys[i]) for i in range(len(xs)))


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


EVENTS = CompileEvents()  # listens to jax.monitoring from here on


def _warm_calls(est_call: Callable[[], Any], counter: Any) -> tuple[float, dict[str, Any], Any]:
    """Seconds of one whole call, what it cost besides running (model_fn calls, seconds
    tracing and lowering, XLA compiles: from jax.monitoring), and its result."""
    before = counter.calls
    EVENTS.reset()
    t, out = _timed(est_call)
    ev = EVENTS.summary()
    info = {
        "model_fn_calls": counter.calls - before,
        **{k: ev[k] for k in ("trace_s", "lower_s", "xla_compiles", "compile_s")},
        "compiled": [e["fun"] for e in EVENTS.executables if not e["cache_hit"]],
    }
    return t, info, out


def _info_line(info: dict[str, Any]) -> str:
    return (
        f"model_fn calls {info['model_fn_calls']}, trace {info['trace_s'] * 1e3:.0f} ms, "
        f"lower {info['lower_s'] * 1e3:.0f} ms, XLA compiles {info['xla_compiles']}"
    )


# -- plain: Estimator, one step per dispatch ---------------------------------------------------
def section_plain(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    steps = args.plain_steps
    xs, ys = digits_batches(steps, args.batch, SEED)
    step = hand_train_step()
    params0 = mlp_params(SEED)
    opt0 = optax.adam(1e-2).init(params0)

    save = OrbaxFinalSave(os.path.join(model_dir, "hand_checkpoints"))

    def hand(n: int, saving: bool = False) -> tuple[float, Any]:
        params, opt, t0 = params0, opt0, time.perf_counter()
        for i in range(n):
            params, opt, loss = step(params, opt, xs[i], ys[i])
            float(loss)  # read every step
        if saving:
            save({"params": params, "opt_state": opt})
        return time.perf_counter() - t0, params

    model_fn = CountingModelFn(jaxspec.EstimatorSpec)
    est = jaxspec.Estimator(
        model_fn,
        model_dir=model_dir,
        config=jaxspec.RunConfig(**QUIET_CONFIG),
        init_fn=lambda: mlp_state(SEED),
    )
    _, hand_params = hand(steps)  # compile, and touch the batches once, as jaxspec's first call does
    first_s, _ = _timed(lambda: est.train(_train_input(xs, ys), steps=steps))
    return _alternate(
        "plain",
        args.repeats,
        steps,
        "steps",
        lambda: hand(steps),
        lambda: _warm_calls(lambda: est.train(_train_input(xs, ys), steps=steps), model_fn),
        first_s,
        params_diff(hand_params, checkpoint_params(est)),
        hand_saving=lambda: hand(steps, saving=True),
    )


# -- scan: TPUEstimator(use_tpu=False, iterations_per_loop) against jit + lax.scan -------------
def hand_scan_loop() -> Callable[..., Any]:
    """``jax.jit`` of a ``lax.scan`` over steps of the same math as ``hand_train_step``."""
    tx = optax.adam(1e-2)

    @jax.jit
    def loop(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def body(carry: Any, batch: Any) -> Any:
            p, o = carry
            loss, grads = jax.value_and_grad(mlp_loss)(p, *batch)
            updates, o = tx.update(grads, o, p)
            return (optax.apply_updates(p, updates), o), loss

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (x, y))
        return params, opt_state, losses

    return loop


def section_scan(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    steps, ipl = args.scan_steps, args.iterations_per_loop
    xs, ys = digits_batches(steps, args.batch, SEED)
    loop = hand_scan_loop()
    params0 = mlp_params(SEED)
    opt0 = optax.adam(1e-2).init(params0)
    device = jax.devices()[0]

    save = OrbaxFinalSave(os.path.join(model_dir, "hand_checkpoints"))

    def hand(n: int, saving: bool = False) -> tuple[float, Any]:
        params, opt, t0 = params0, opt0, time.perf_counter()
        for i in range(0, n, ipl):
            x, y = jax.device_put(xs[i : i + ipl], device), jax.device_put(ys[i : i + ipl], device)
            params, opt, losses = loop(params, opt, x, y)
        float(np.asarray(losses)[-1])  # the last loss, read at the end
        jax.block_until_ready(params)
        if saving:
            save({"params": params, "opt_state": opt})
        return time.perf_counter() - t0, params

    model_fn = CountingModelFn(jaxspec.TPUEstimatorSpec)
    config = jaxspec.RunConfig(tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl), **QUIET_CONFIG)
    est = jaxspec.TPUEstimator(
        model_fn,
        model_dir=model_dir,
        config=config,
        use_tpu=False,
        train_batch_size=args.batch,
        init_fn=lambda: mlp_state(SEED),
    )
    _, hand_params = hand(steps)  # compile, and touch the batches once, as jaxspec's first call does
    first_s, _ = _timed(lambda: est.train(_train_input(xs, ys), steps=steps))
    return _alternate(
        "scan",
        args.repeats,
        steps,
        "steps",
        lambda: hand(steps),
        lambda: _warm_calls(lambda: est.train(_train_input(xs, ys), steps=steps), model_fn),
        first_s,
        params_diff(hand_params, checkpoint_params(est)),
        hand_saving=lambda: hand(steps, saving=True),
    )


def checkpoint_params(est: Any) -> Any:
    """The MLP parameters of the latest checkpoint (``params/<flax path>`` state leaves)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: est.get_variable_value("params/" + "/".join(str(getattr(k, "key", k)) for k in path)),
        mlp_params(SEED),
    )


def params_diff(a: Any, b: Any) -> float:
    """Largest absolute difference between two parameter trees of the same structure."""
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _alternate(
    name: str,
    repeats: int,
    work: int,
    unit: str,
    hand: Callable[[], tuple[float, Any]],
    warm: Callable[[], tuple[float, dict[str, Any], Any]],
    first_s: float,
    first_params_diff: float,
    hand_saving: Callable[[], tuple[float, Any]] | None = None,
) -> dict[str, Any]:
    """Alternate ``hand`` and ``warm`` ``repeats`` times (and ``hand_saving``, the hand
    loop followed by an Orbax save of its final state, when given: a row for reference,
    not the goal's baseline); the summary rows, with ``first_params_diff`` (the hand
    loop's parameters against those of jaxspec's first call: same initial state, same
    steps)."""
    hand_t, js_t, saving_t, calls = [], [], [], []
    for rep in range(repeats):
        t, _ = hand()
        hand_t.append(t)
        t_js, info, _ = warm()
        js_t.append(t_js)
        calls.append(info)
        line = f"  {name} rep {rep}: baseline {t:.3f}s  jaxspec warm call {t_js:.3f}s"
        if hand_saving is not None:
            saving_t.append(hand_saving()[0])
            line += f"  baseline + Orbax save {saving_t[-1]:.3f}s"
        print(f"{line}  ({_info_line(info)})")
    base = statistics.median(hand_t)
    jaxspec_row = time_summary(js_t, work, unit, base)
    extra: dict[str, Any] = {}
    if saving_t:
        saving_row = time_summary(saving_t, work, unit, base)
        extra = {
            "baseline_with_save": saving_row,
            "ratio_vs_baseline_with_save": statistics.median(saving_t) / statistics.median(js_t),
        }
    return {
        "work": work,
        "unit": unit,
        "baseline": time_summary(hand_t, work, unit),
        "jaxspec_warm": jaxspec_row,
        **extra,
        "ratio": jaxspec_row["ratio_vs_baseline"],
        "first_call_s": first_s,
        "per_warm_call": calls,
        "model_fn_calls_per_warm_call": [c["model_fn_calls"] for c in calls],
        "final_params_max_abs_diff": first_params_diff,
    }


# -- evaluate: whole evaluate() against eval_metrics.py's hand loop -----------------------------
def section_evaluate(args: argparse.Namespace, model_dir: str, plain: bool = False) -> dict[str, Any]:
    """``plain``: a plain Estimator (grouped batches) on one device, else TPUEstimator."""
    import eval_metrics as em  # its hand-written loop and metric_fn/model_fn

    steps, batch, ipl = args.eval_steps, args.eval_batch, args.eval_iterations_per_loop
    x_train, y_train, x_test, y_test = em.DIGITS.load_data()
    params = em.train_params(x_train, y_train)
    xs, ys = em.make_batches(x_test, y_test, steps, batch)
    devices = jax.devices() if args.eval_mesh and not plain else jax.devices()[:1]
    mesh = Mesh(np.array(devices), (em.AXIS,))
    sharding = NamedSharding(mesh, P(None, em.AXIS))
    mesh_params = jax.device_put(params, NamedSharding(mesh, P()))
    hand_fn = em.make_baseline(mesh, "bucket")

    class Counter:
        calls = 0

    def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> Any:
        Counter.calls += 1
        spec = em.model_fn(features, labels, mode, params, state)
        if not plain:
            return spec
        metric_fn, tensors = spec.eval_metrics
        return jaxspec.EstimatorSpec(mode, loss=spec.loss, eval_metric_ops=metric_fn(*tensors))

    if plain:
        est = jaxspec.Estimator(
            model_fn,
            model_dir=model_dir,
            config=jaxspec.RunConfig(**QUIET_CONFIG),
            params={},
            init_fn=lambda: {"params": params},
        )
    else:
        config = jaxspec.RunConfig(tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl), **QUIET_CONFIG)
        est = jaxspec.TPUEstimator(
            model_fn,
            model_dir=model_dir,
            config=config,
            params={},
            use_tpu=args.eval_mesh,
            train_batch_size=batch,
            eval_batch_size=batch,
            init_fn=lambda: {"params": params},
        )

    def input_fn(params: dict[str, Any]) -> Iterator[Any]:
        return (({"x": xs[i]}, ys[i]) for i in range(len(xs)))

    em.run_baseline(hand_fn, mesh_params, xs, ys, ipl, sharding)  # compile, touch the batches
    first_s, _ = _timed(lambda: est.evaluate(input_fn))
    hand_t, js_t, calls = [], [], []
    for rep in range(args.repeats):
        t, hand_values = em.run_baseline(hand_fn, mesh_params, xs, ys, ipl, sharding)
        hand_t.append(t)
        t_js, info, results = _warm_calls(lambda: est.evaluate(input_fn), Counter)
        js_t.append(t_js)
        calls.append(info)
        print(f"  evaluate rep {rep}: baseline {t:.3f}s  jaxspec warm call {t_js:.3f}s  ({_info_line(info)})")
    examples = steps * batch
    base = statistics.median(hand_t)
    row = time_summary(js_t, examples, "examples", base)
    names = ("accuracy", "auc", "mean_per_class_accuracy")
    return {
        "work": examples,
        "unit": "examples",
        "devices": len(devices),
        "baseline": time_summary(hand_t, examples, "examples"),
        "jaxspec_warm": row,
        "ratio": row["ratio_vs_baseline"],
        "first_call_s": first_s,
        "per_warm_call": calls,
        "model_fn_calls_per_warm_call": [c["model_fn_calls"] for c in calls],
        "values": {
            "baseline": hand_values,
            "jaxspec": {k: float(results[k]) for k in names},
            "max_abs_diff": max(abs(float(results[k]) - hand_values[k]) for k in names),
        },
    }


# -- predict: one row, many calls -------------------------------------------------------------
def section_predict(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    xs, ys = digits_batches(args.predict_train_steps, args.batch, SEED)
    model_fn = CountingModelFn(jaxspec.EstimatorSpec)
    est = jaxspec.Estimator(
        model_fn,
        model_dir=model_dir,
        config=jaxspec.RunConfig(**QUIET_CONFIG),
        init_fn=lambda: mlp_state(SEED),
    )
    est.train(_train_input(xs, ys), steps=args.predict_train_steps)
    params = checkpoint_params(est)
    row = xs[-1][:1]  # [1, 64]
    forward = jax.jit(lambda p, x: jax.nn.softmax(DigitsMLP().apply(p, x)))
    np.asarray(forward(params, row))  # compile

    def hand() -> tuple[float, np.ndarray]:
        return _timed(lambda: np.asarray(forward(params, row)))

    hand_t, js_t, infos, preds = [], [], [], []
    for i in range(args.predict_calls):
        t, probs = hand()
        hand_t.append(t)
        t_js, info, preds = _warm_calls(lambda: list(est.predict(lambda: {"x": row})), model_fn)
        js_t.append(t_js)
        infos.append(info)
        if i < 3 or i == args.predict_calls - 1:
            print(
                f"  predict call {i}: baseline {t * 1e3:.3f} ms  jaxspec {t_js * 1e3:.1f} ms  ({_info_line(info)})"
            )
    calls = [info["model_fn_calls"] for info in infos]
    after = js_t[1:]
    med_ms = statistics.median(after) * 1e3
    base_ms = statistics.median(hand_t[1:]) * 1e3
    return {
        "calls": args.predict_calls,
        "first_call_ms": js_t[0] * 1e3,
        "median_ms": med_ms,
        "min_ms": min(after) * 1e3,
        "max_ms": max(after) * 1e3,
        "baseline_median_ms": base_ms,
        "ratio": base_ms / med_ms,
        "times_ms": [t * 1e3 for t in js_t],
        "baseline_times_ms": [t * 1e3 for t in hand_t],
        "per_call": infos,
        "model_fn_calls_per_call": calls,
        "model_fn_calls_after_first": sum(calls[1:]),
        "rows_per_call": len(preds),
        "max_abs_diff_probabilities": float(np.max(np.abs(preds[0]["probabilities"] - probs[0]))),
    }


# -- driver ---------------------------------------------------------------------------------------
def goal_rows(sections: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for goal, (key, op, target) in GOALS.items():
        section = sections.get(goal if goal in SECTIONS else goal.split("_")[0])
        if section is None:
            continue
        value = section[key]
        met = value >= target if op == ">=" else value <= target
        rows.append({"goal": goal, "value": value, "target": f"{op} {target}", "met": bool(met)})
    return rows


def print_tables(sections: dict[str, dict[str, Any]]) -> None:
    print(
        f"\n{'section':<16}{'side':<14}{'median s':>10}{'min s':>9}{'max s':>9}{'rate/s':>11}{'ratio':>8}{'first s':>9}"
    )
    for name, s in sections.items():
        if name == "predict":
            continue
        rate = f"{s['unit']}_per_s"
        for side in ("baseline", "baseline_with_save", "jaxspec_warm"):
            if side not in s:
                continue
            r = s[side]
            ratio = f"{r.get('ratio_vs_baseline', 1.0):.2f}"
            first = f"{s['first_call_s']:.2f}" if side == "jaxspec_warm" else ""
            label = {"baseline_with_save": "baseline+save"}.get(side, side)
            print(
                f"{name:<16}{label:<14}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}"
                f"{r[rate]:>11.0f}{ratio:>8}{first:>9}"
            )
    if "predict" in sections:
        p = sections["predict"]
        print(
            f"\npredict, one row, {p['calls']} calls: first {p['first_call_ms']:.1f} ms; after it median "
            f"{p['median_ms']:.1f} ms (min {p['min_ms']:.1f}, max {p['max_ms']:.1f}); hand jit "
            f"{p['baseline_median_ms']:.3f} ms; model_fn calls after the first call: {p['model_fn_calls_after_first']}"
        )
    for name, s in sections.items():
        if "final_params_max_abs_diff" in s:
            print(
                f"{name}: final parameters max |jaxspec first call - baseline| {s['final_params_max_abs_diff']:.2e}"
            )
        if "values" in s:
            print(f"{name}: metric values max |jaxspec - baseline| {s['values']['max_abs_diff']:.2e}")
        per_call = s.get("per_warm_call", s.get("per_call", []))[1 if name == "predict" else 0 :]
        if per_call:
            traced = statistics.median(c["trace_s"] + c["lower_s"] for c in per_call)
            print(
                f"{name}: per warm call: model_fn calls {[c['model_fn_calls'] for c in per_call]}, "
                f"XLA compiles {[c['xla_compiles'] for c in per_call]}, tracing + lowering {traced * 1e3:.0f} ms (median)"
            )
    for name, s in sections.items():
        if "ratio_vs_baseline_with_save" in s:
            print(
                f"{name}: jaxspec against the hand loop that also saves its final state with Orbax "
                f"(reference, not the goal): {s['ratio_vs_baseline_with_save']:.2f}"
            )
    print("\ngoals:")
    for g in goal_rows(sections):
        print(
            f"  {g['goal']:<18}{g['value']:>10.3f}  target {g['target']:<8} {'met' if g['met'] else 'NOT met'}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    ap.add_argument("--repeats", type=int, default=5, help="timed repetitions per section")
    ap.add_argument("--batch", type=int, default=MLP_BATCH, help="training batch (plain, scan, predict)")
    ap.add_argument("--plain-steps", type=int, default=1000, help="steps per plain Estimator train() call")
    ap.add_argument("--scan-steps", type=int, default=5000, help="steps per TPUEstimator train() call")
    ap.add_argument("--iterations-per-loop", type=int, default=100, help="scan section's iterations_per_loop")
    ap.add_argument("--eval-steps", type=int, default=64, help="eval batches per evaluate() call")
    ap.add_argument("--eval-batch", type=int, default=512, help="eval batch size")
    ap.add_argument("--eval-iterations-per-loop", type=int, default=16)
    ap.add_argument("--eval-mesh", action="store_true", help="evaluate over every device (use_tpu=True)")
    ap.add_argument("--predict-calls", type=int, default=20)
    ap.add_argument("--predict-train-steps", type=int, default=20, help="training before the predict calls")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "call_overhead.json"))
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    if unknown := set(only) - set(SECTIONS):
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    if args.scan_steps % args.iterations_per_loop or args.eval_steps % args.eval_iterations_per_loop:
        ap.error("--scan-steps and --eval-steps must be multiples of their iterations per loop")
    if args.predict_calls < 2:
        ap.error("--predict-calls must be at least 2 (the first call is reported apart)")
    logging.getLogger("jaxspec").setLevel(logging.WARNING)
    print(
        f"{jax.device_count()} {jax.devices()[0].platform} devices; sections {only}; {args.repeats} repeats; "
        f"jaxspec from {os.path.dirname(jaxspec.__file__)}"
    )

    runners = {
        "plain": section_plain,
        "scan": section_scan,
        "evaluate": section_evaluate,
        "evaluate_plain": lambda args, model_dir: section_evaluate(args, model_dir, plain=True),
        "predict": section_predict,
    }
    sections: dict[str, dict[str, Any]] = {}
    for name in only:
        print(f"[{name}]")
        with tempfile.TemporaryDirectory(prefix=f"jaxspec_calls_{name}_") as model_dir:
            sections[name] = runners[name](args, model_dir)
    print_tables(sections)
    write_json(
        args.out,
        {
            "config": {
                **{k: v for k, v in vars(args).items() if k != "out"},
                "devices": jax.device_count(),
                "platform": jax.devices()[0].platform,
                "jax": jax.__version__,
                "jaxspec": jaxspec.__version__,
                "jaxspec_path": os.path.dirname(jaxspec.__file__),
            },
            "sections": sections,
            "goals": goal_rows(sections),
        },
    )
    if disagree := disagreements(sections):
        raise SystemExit(f"jaxspec and the hand-written side did not compute the same thing: {disagree}")


def disagreements(sections: dict[str, dict[str, Any]], tol: float = 1e-5) -> dict[str, float]:
    """Sections whose jaxspec and baseline results differ by more than ``tol`` (final
    loss, metric values, predicted probabilities): the timings would not compare."""
    diffs = {
        "plain": sections.get("plain", {}).get("final_params_max_abs_diff", 0.0),
        "scan": sections.get("scan", {}).get("final_params_max_abs_diff", 0.0),
        "evaluate": sections.get("evaluate", {}).get("values", {}).get("max_abs_diff", 0.0),
        "evaluate_plain": sections.get("evaluate_plain", {}).get("values", {}).get("max_abs_diff", 0.0),
        "predict": sections.get("predict", {}).get("max_abs_diff_probabilities", 0.0),
    }
    return {k: v for k, v in diffs.items() if not v <= tol}


if __name__ == "__main__":
    main()
