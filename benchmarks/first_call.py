"""First call and steady rate of a plain ``jaxspec.Estimator`` against hand-written JAX loops.

Two models, each trained with plain optax/flax on one device, the same math on both
sides (adam 1e-3, mean softmax cross entropy):

* ``mlp``: 8 x Dense(512)-relu then Dense(10) on 64 inputs, batch 32 (issue 46's model);
* ``transformer``: a stack of pre-norm Transformer blocks (flax ``SelfAttention``,
  causal, and an MLP), next-token loss over a 128-token vocabulary (``--blocks``,
  ``--width``, sequence 32, batch 16).

Sections, per model:

* ``first_call``: in a new process each (``--repeats`` times, alternating), with JAX's
  persistent compilation cache off (a model's first run): the hand loop's first call,
  ``init`` (eager flax init, ``optax.init``), ``jax.jit`` of one step, ``--steps``
  steps reading the last loss, one Orbax save of the final state (what ``train()``
  leaves on disk); and jaxspec's first ``train(steps=--steps)`` of a new Estimator with
  tf.estimator's default RunConfig on a new model_dir. Each process counts the
  programs XLA compiled (``jax.monitoring``'s backend-compile events, by function
  name) and their seconds. ``ratio`` = jaxspec seconds / hand seconds (goal <= 1.15).
* ``steady``: in this process, whole warm ``train(steps=--steps)`` calls against
  ``jax.jit`` of a ``lax.scan`` of 100 steps per dispatch with one Orbax save of its
  final state, repetitions alternating; ``ratio`` = jaxspec throughput / hand
  throughput (goal >= 0.95). The parameters after jaxspec's first call here are
  compared with the hand scan's (same initial state, same batches): the script exits
  non-zero when they differ by more than 1e-5.

Results go to ``results/first_call.json``. On a shared machine, run it 2-3 times: the
ratios inside one run are what count.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAXSPEC_BENCH_HOST_DEVICES", "1")
os.environ["JAXSPEC_COMPILATION_CACHE_DIR"] = "off"  # a model's first run: nothing cached
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.monitoring  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from _common import OrbaxFinalSave, time_summary, write_json  # noqa: E402
from flax.training import train_state  # noqa: E402

import jaxspec  # noqa: E402

SEED, LR, IPL = 0, 1e-3, 100
GOALS = {"first_call": 1.15, "steady": 0.95}
BACKEND = "/jax/core/compile/backend_compile_duration"


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(8):
            x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(10)(x)


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:
        mask = nn.make_causal_mask(h[..., 0])
        h = h + nn.SelfAttention(num_heads=4, qkv_features=self.width)(nn.LayerNorm()(h), mask=mask)
        return h + nn.Dense(self.width)(nn.gelu(nn.Dense(4 * self.width)(nn.LayerNorm()(h))))


class Transformer(nn.Module):
    blocks: int
    width: int
    vocab: int = 128

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        h = nn.Embed(self.vocab, self.width)(tokens)
        for _ in range(self.blocks):
            h = Block(self.width)(h)
        return nn.Dense(self.vocab)(nn.LayerNorm()(h))


def _model(name: str, args: argparse.Namespace) -> nn.Module:
    return MLP() if name == "mlp" else Transformer(args.blocks, args.width)


def _data(name: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` batches: (x, y) stacked on axis 0."""
    rng = np.random.RandomState(SEED)
    if name == "mlp":
        return rng.randn(steps, 32, 64).astype(np.float32), rng.randint(0, 10, (steps, 32)).astype(np.int32)
    tokens = rng.randint(0, 128, (steps, 16, 33)).astype(np.int32)
    return tokens[..., :-1], tokens[..., 1:]


def _loss(model: nn.Module, params: Any, x: Any, y: Any) -> Any:
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y).mean()


def _init(model: nn.Module, x: np.ndarray) -> Any:
    return model.init(jax.random.PRNGKey(SEED), x[:1])


def _estimator(name: str, args: argparse.Namespace, model_dir: str) -> jaxspec.Estimator:
    model = _model(name, args)

    def model_fn(features: Any, labels: Any, mode: str, state: Any) -> Any:
        loss, grads = jax.value_and_grad(lambda p: _loss(model, p, features, labels))(state.params)
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))

    def init_fn(features: Any) -> Any:
        return train_state.TrainState.create(
            apply_fn=model.apply, params=_init(model, features), tx=optax.adam(LR)
        )

    return jaxspec.Estimator(model_fn, model_dir=model_dir, init_fn=init_fn)


def _input(xs: np.ndarray, ys: np.ndarray) -> Any:
    return lambda: ((xs[i], ys[i]) for i in range(len(xs)))


class Compiles:
    """Programs XLA compiles while recording: (function name, seconds)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, secs: float, **kwargs: Any) -> None:
        if event == BACKEND:
            self.events.append((str(kwargs.get("fun_name", "?")), secs))

    def summary(self) -> dict[str, Any]:
        loops = [s for n, s in self.events if "train" in n or n == "jit(step)" or n == "jit(loop)"]
        return {
            "programs": len(self.events),
            "compile_s": sum(s for _, s in self.events),
            "training_programs": len(loops),
            "training_compile_s": sum(loops),
            "names": sorted({n for n, _ in self.events}),
        }


def _hand_step(model: nn.Module) -> Any:
    tx = optax.adam(LR)

    @jax.jit
    def step(params: Any, opt: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(lambda p: _loss(model, p, x, y))(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    return step


def _hand_scan(model: nn.Module) -> Any:
    tx = optax.adam(LR)

    @jax.jit
    def loop(params: Any, opt: Any, x: Any, y: Any) -> Any:
        def body(carry: Any, batch: Any) -> Any:
            p, o = carry
            loss, grads = jax.value_and_grad(lambda q: _loss(model, q, *batch))(p)
            updates, o = tx.update(grads, o, p)
            return (optax.apply_updates(p, updates), o), loss

        (params, opt), losses = jax.lax.scan(body, (params, opt), (x, y))
        return params, opt, losses

    return loop


def child(name: str, side: str, args: argparse.Namespace) -> dict[str, Any]:
    """One first call in this (new) process: its seconds and what XLA compiled."""
    xs, ys = _data(name, args.steps)
    model = _model(name, args)
    compiles = Compiles()
    with tempfile.TemporaryDirectory(prefix="jaxspec_first_call_") as model_dir:
        t0 = time.perf_counter()
        if side == "hand":
            params = _init(model, xs[0])
            opt = optax.adam(LR).init(params)
            step = _hand_step(model)
            for i in range(args.steps):
                params, opt, loss = step(params, opt, xs[i], ys[i])
            float(loss)
            OrbaxFinalSave(os.path.join(model_dir, "hand"))({"params": params, "opt_state": opt})
        else:
            _estimator(name, args, model_dir).train(_input(xs, ys), steps=args.steps)
        secs = time.perf_counter() - t0
    return {"s": secs, **compiles.summary()}


def _run_child(name: str, side: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", f"{name}:{side}", "--steps", str(args.steps)]
    cmd += ["--blocks", str(args.blocks), "--width", str(args.width)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def first_call(name: str, args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"hand": [], "jaxspec": []}
    for rep in range(args.repeats):
        for side in ("hand", "jaxspec"):
            runs[side].append(_run_child(name, side, args))
        h, j = runs["hand"][-1], runs["jaxspec"][-1]
        print(
            f"  first call rep {rep}: hand {h['s']:.2f}s ({h['training_programs']} training programs, "
            f"{h['compile_s']:.2f}s compiling)  jaxspec {j['s']:.2f}s ({j['training_programs']} training "
            f"programs, {j['compile_s']:.2f}s compiling)"
        )
    ratios = [j["s"] / h["s"] for h, j in zip(runs["hand"], runs["jaxspec"], strict=True)]
    return {
        "hand": runs["hand"],
        "jaxspec": runs["jaxspec"],
        "ratios": ratios,
        "ratio": statistics.median(ratios),
        "jaxspec_training_programs": max(r["training_programs"] for r in runs["jaxspec"]),
    }


def steady(name: str, args: argparse.Namespace) -> dict[str, Any]:
    xs, ys = _data(name, args.steps)
    model = _model(name, args)
    loop, params0 = _hand_scan(model), _init(model, xs[0])
    opt0, device = optax.adam(LR).init(params0), jax.devices()[0]
    with tempfile.TemporaryDirectory(prefix="jaxspec_steady_") as model_dir:
        save = OrbaxFinalSave(os.path.join(model_dir, "hand"))

        def hand() -> tuple[float, Any]:
            t0 = time.perf_counter()
            params, opt = params0, opt0
            for i in range(0, len(xs), IPL):
                x, y = jax.device_put(xs[i : i + IPL], device), jax.device_put(ys[i : i + IPL], device)
                params, opt, losses = loop(params, opt, x, y)
            float(np.asarray(losses)[-1])
            save({"params": params, "opt_state": opt})
            return time.perf_counter() - t0, params

        est = _estimator(name, args, os.path.join(model_dir, "est"))
        _, hand_params = hand()  # compiles
        est.train(_input(xs, ys), steps=args.steps)
        diff = max(
            float(
                np.max(
                    np.abs(
                        np.asarray(v)
                        - est.get_variable_value("params/" + "/".join(str(getattr(k, "key", k)) for k in p))
                    )
                )
            )
            for p, v in jax.tree_util.tree_flatten_with_path(hand_params)[0]
        )
        hand_t, js_t = [], []
        for rep in range(args.repeats):
            hand_t.append(hand()[0])
            t0 = time.perf_counter()
            est.train(_input(xs, ys), steps=args.steps)
            js_t.append(time.perf_counter() - t0)
            print(f"  steady rep {rep}: hand scan {hand_t[-1]:.3f}s  jaxspec warm call {js_t[-1]:.3f}s")
    row = time_summary(js_t, args.steps, "steps", statistics.median(hand_t))
    return {
        "hand_scan": time_summary(hand_t, args.steps, "steps"),
        "jaxspec_warm": row,
        "ratio": row["ratio_vs_baseline"],
        "params_max_abs_diff": diff,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "first_call.json"))
    args = ap.parse_args()
    logging.getLogger("jaxspec").setLevel(logging.WARNING)
    if args.child:
        name, side = args.child.split(":")
        print(json.dumps(child(name, side, args)))
        return
    print(f"{jax.devices()[0].platform} device; {args.steps} steps; {args.repeats} repeats")
    results = {}
    for name in [m for m in args.models.split(",") if m]:
        print(f"[{name}]")
        results[name] = {"first_call": first_call(name, args), "steady": steady(name, args)}
    print(
        f"\n{'model':<13}{'first call x hand':>19}{'programs':>10}{'compile s':>11}{'steady x scan':>15}  diff"
    )
    for name, r in results.items():
        f, s = r["first_call"], r["steady"]
        compile_s = statistics.median(j["compile_s"] for j in f["jaxspec"])
        print(
            f"{name:<13}{f['ratio']:>19.3f}{f['jaxspec_training_programs']:>10}{compile_s:>11.2f}"
            f"{s['ratio']:>15.3f}  {s['params_max_abs_diff']:.1e}"
        )
    write_json(
        args.out,
        {
            "config": {**vars(args), "platform": jax.devices()[0].platform, "jax": jax.__version__},
            "models": results,
            "goals": {
                f"{m}/{k}": {"target": v, "value": results[m][k]["ratio"]}
                for m in results
                for k, v in GOALS.items()
            },
        },
    )
    bad = {
        m: r["steady"]["params_max_abs_diff"]
        for m, r in results.items()
        if not r["steady"]["params_max_abs_diff"] <= 1e-5
    }
    if bad:
        raise SystemExit(f"jaxspec and the hand loop did not compute the same parameters: {bad}")


if __name__ == "__main__":
    main()
