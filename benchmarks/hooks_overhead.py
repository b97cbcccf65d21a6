"""What the standard SessionRunHooks cost ``jaxspec.TPUEstimator.train`` per loop.

The digits MLP (Dense(128)-relu-Dense(64)-relu-Dense(10) as examples/digits.py, adam
1e-2, softmax cross entropy, global batch 128) trains with ``TPUEstimator(use_tpu=True)``
over every device (8 virtual CPU devices unless XLA_FLAGS names a count), on the same
pre-generated batches from the same initial parameters, in two settings:

* ``off``: no user hooks, no periodic checkpoints, summaries or step logs (only the
  final checkpoint every ``train()`` call writes).
* ``on``: user hooks LoggingTensorHook({loss, global_step}, every_n_iter=1),
  StepCounterHook(every_n_steps=1, output_dir), SummarySaverHook(save_steps=1,
  output_dir, summary_op={'loss': 'loss'}), NanTensorHook('loss'),
  StopAtStepHook(last_step=end of the call); a spec hook built in model_fn
  (LoggingTensorHook on an array, fetched through ``step_tensors``); and RunConfig
  save_checkpoints_steps / save_summary_steps / log_step_count_steps = ``--every``.

With iterations_per_loop > 1 hooks run once per loop (as TPUEstimator's), so "every 1"
means every loop. The ``jaxspec`` logger gets a NullHandler at INFO and does not
propagate: the hooks build their log records, but nothing is printed, so terminal I/O is
not what is measured.

Per estimator a short warm-up ``train()`` runs first (imports, caches, first checkpoint).
Each repetition then calls ``train(steps=N)`` on the off, then the on estimator;
``steady`` is the time from the end of loop 1 to the end of the last loop (a clock hook
that runs first in both settings), scaled to N steps: per-loop cost, hooks included,
without tracing, compiling, restoring or the final save. ``call`` is the whole call.
Ratios are on median / off median. On CPU this is framework overhead, not device speed.

``--summaries`` measures the Estimator's own training summaries instead (issue 36): a
plain ``jaxspec.Estimator`` (one device, grouped loops) trains the same MLP for
``--steps`` (default 1000) per call, with one optimizer in every setting (adam under
``optax.inject_hyperparams`` with a decaying rate, so the optimizer's own cost is not
measured as the summaries'), in three settings: ``off`` with ``save_summary_steps`` and
``log_step_count_steps`` None (no summaries, no lines), ``base`` with both 100
(``loss``, ``global_step/sec``, ``examples/sec``, ``learning_rate`` at TF's steps, and
the per-compile ``perf/``/``memory/`` figures: the warm-up call compiles, the timed ones
reuse the executables, as a long run does), ``summaries`` as ``base`` plus ``perf/mfu``
(``peak_flops_per_device`` set). Each whole call is timed; ``summaries``/``off`` is the
cost of all of the Estimator's own summaries and log lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
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

import jaxspec

BATCH = 128
LR = 1e-2
SEED = 0
NEVER = 10**9  # save_summary_steps / log_step_count_steps that never fire


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(10)(nn.relu(nn.Dense(64)(x)))


def init_fn(features: Any) -> train_state.TrainState:
    params = MLP().init(jax.random.PRNGKey(SEED), features["x"][:1])
    return train_state.TrainState.create(
        apply_fn=MLP().apply, params=params, tx=jaxspec.CrossShardOptimizer(optax.adam(LR))
    )


def make_model_fn(spec_hook: bool) -> Any:
    """A TRAIN model_fn; with ``spec_hook`` its spec carries a LoggingTensorHook on an array."""

    def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.TPUEstimatorSpec:
        def loss_of(p: Any) -> tuple[jax.Array, jax.Array]:
            logits = state.apply_fn(p, features["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits

        (loss, logits), grads = jax.value_and_grad(loss_of, has_aux=True)(state.params)
        hooks = []
        if spec_hook:
            confidence = jnp.max(jax.nn.softmax(logits), axis=-1).mean()
            hooks.append(jaxspec.LoggingTensorHook({"confidence": confidence}, every_n_iter=1))
        return jaxspec.TPUEstimatorSpec(
            mode, loss=loss, train_op=state.apply_gradients(grads=grads), training_hooks=hooks
        )

    return model_fn


class Bench:
    """One estimator (hooks on or off) in its own model_dir; ``train`` times one call."""

    def __init__(self, on: bool, ipl: int, every: int, root: str, xs: np.ndarray, ys: np.ndarray) -> None:
        self.on, self.ipl, self.xs, self.ys = on, ipl, xs, ys
        self.model_dir = os.path.join(root, f"{'on' if on else 'off'}_ipl{ipl}")
        periodic: dict[str, Any] = (
            dict(save_checkpoints_steps=every, save_summary_steps=every, log_step_count_steps=every)
            if on
            else dict(save_checkpoints_steps=None, save_summary_steps=NEVER, log_step_count_steps=NEVER)
        )
        config = jaxspec.RunConfig(
            tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl), save_checkpoints_secs=None, **periodic
        )
        self.est = jaxspec.TPUEstimator(
            make_model_fn(on),
            model_dir=self.model_dir,
            config=config,
            use_tpu=True,
            train_batch_size=BATCH,
            init_fn=init_fn,
        )
        self.global_step = 0

    def input_fn(self, steps: int) -> Any:
        def fn() -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
            return (({"x": self.xs[i]}, self.ys[i]) for i in range(steps))

        return fn

    def hooks(self, clock: LoopClock, last_step: int) -> list[jaxspec.SessionRunHook]:
        if not self.on:
            return [clock]
        events = os.path.join(self.model_dir, "hooks")
        return [
            clock,
            jaxspec.LoggingTensorHook({"loss": "loss", "step": "global_step"}, every_n_iter=1),
            jaxspec.StepCounterHook(every_n_steps=1, output_dir=events),
            jaxspec.SummarySaverHook(save_steps=1, output_dir=events, summary_op={"loss": "loss"}),
            jaxspec.NanTensorHook("loss"),
            jaxspec.StopAtStepHook(last_step=last_step),
        ]

    def train(self, steps: int) -> dict[str, float]:
        """One ``train(steps=steps)``: whole-call and steady-state seconds, final loss."""
        clock = LoopClock()
        t0 = time.perf_counter()
        self.est.train(self.input_fn(steps), hooks=self.hooks(clock, self.global_step + steps), steps=steps)
        call = time.perf_counter() - t0
        self.global_step += steps
        steady = (clock.times[-1] - clock.times[0]) * steps / (steps - self.ipl)
        return {"call": call, "steady": steady, "loss": clock.losses[-1]}


def _quiet_logs() -> None:
    """The ``jaxspec`` logger to a NullHandler at INFO (records built, nothing printed)."""
    log = logging.getLogger("jaxspec")
    log.handlers[:] = [logging.NullHandler()]
    log.setLevel(logging.INFO)
    log.propagate = False
    for noisy in ("absl", "orbax", "jax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def summary(times: list[float], steps: int) -> dict[str, Any]:
    med = statistics.median(times)
    return {
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "steps_per_s": steps / med,
        "times_s": times,
    }


def _summaries_estimator(name: str, root: str) -> jaxspec.Estimator:
    """``off``: no summaries; ``base``: loss, rates and learning_rate every 100 steps, no
    peak; ``summaries``: the same with ``perf/mfu`` (a peak given). One optimizer in all."""
    on, new = name != "off", name == "summaries"
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=optax.exponential_decay(LR, 100, 0.9))

    def init(features: Any) -> train_state.TrainState:
        params = MLP().init(jax.random.PRNGKey(SEED), features["x"][:1])
        return train_state.TrainState.create(apply_fn=MLP().apply, params=params, tx=tx)

    every = 100 if on else None
    config = jaxspec.RunConfig(
        save_summary_steps=every,
        log_step_count_steps=every,
        save_checkpoints_secs=None,
        save_checkpoints_steps=None,
        peak_flops_per_device=1e12 if new else None,
    )
    tpu_model_fn = make_model_fn(False)

    def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> jaxspec.EstimatorSpec:
        return tpu_model_fn(features, labels, mode, params, state).as_estimator_spec()

    return jaxspec.Estimator(model_fn, os.path.join(root, name), config=config, init_fn=init, params={})


def summaries_main(steps: int, repeats: int, out: Path) -> None:
    """The ``--summaries`` comparison; see the module docstring."""
    xs, ys = digits_batches(steps, BATCH, SEED)

    def input_fn() -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        return (({"x": xs[i]}, ys[i]) for i in range(steps))

    print(
        f"{jax.devices()[0].platform}: plain Estimator, {steps} steps x {BATCH} examples, {repeats} repeats"
    )
    times: dict[str, list[float]] = {"off": [], "base": [], "summaries": []}
    with tempfile.TemporaryDirectory(prefix="jaxspec_summaries_bench_") as root:
        ests = {name: _summaries_estimator(name, root) for name in times}
        for est in ests.values():
            est.train(input_fn, steps=steps)  # warm-up: compiles every loop size
        for rep in range(repeats):
            for name, est in ests.items():
                t0 = time.perf_counter()
                est.train(input_fn, steps=steps)
                times[name].append(time.perf_counter() - t0)
            print(f"rep {rep}: " + "  ".join(f"{n} {t[-1]:.3f}s" for n, t in times.items()))
    off, base, on = (summary(times[n], steps) for n in ("off", "base", "summaries"))
    ratio, ratio_off = on["median_s"] / base["median_s"], on["median_s"] / off["median_s"]
    print(
        f"median off {off['median_s']:.3f}s, base {base['median_s']:.3f}s, summaries {on['median_s']:.3f}s: "
        f"summaries/base {ratio:.4f}, summaries/off {ratio_off:.4f}"
    )
    result = {
        "config": {"steps": steps, "repeats": repeats, "global_batch": BATCH, "jax": jax.__version__},
        "off": off,
        "base": base,
        "summaries": on,
        "ratio_summaries_base": ratio,
        "ratio_summaries_off": ratio_off,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="steps per timed train() call")
    ap.add_argument("--repeats", type=int, default=4, help="timed calls per setting")
    ap.add_argument("--ipl", type=int, nargs="+", default=[1, 100], help="iterations_per_loop values")
    ap.add_argument(
        "--every",
        type=int,
        default=100,
        help="save_checkpoints_steps, save_summary_steps and log_step_count_steps when hooks are on",
    )
    ap.add_argument("--out", default=None, help="JSON results (default benchmarks/results/<mode>.json)")
    ap.add_argument(
        "--summaries", action="store_true", help="the Estimator's own summaries instead (issue 36)"
    )
    args = ap.parse_args()
    results_dir = Path(__file__).parent / "results"
    if args.summaries:
        _quiet_logs()
        out = Path(args.out or results_dir / "summaries_overhead.json")
        summaries_main(args.steps if args.steps != 300 else 1000, args.repeats, out)
        return
    args.out = args.out or str(results_dir / "hooks_overhead.json")
    steps = args.steps
    for ipl in args.ipl:
        if steps % ipl or steps < 2 * ipl:
            ap.error(f"--steps must be a multiple of every --ipl and at least twice it (ipl {ipl})")

    _quiet_logs()
    xs, ys = digits_batches(steps, BATCH, SEED)
    print(
        f"{jax.device_count()} {jax.devices()[0].platform} devices, {steps} steps x {BATCH} examples per call, "
        f"iterations_per_loop {args.ipl}, {args.repeats} repeats, periodic config every {args.every} steps (on)"
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jaxspec_hooks_bench_") as root:
        for ipl in args.ipl:
            benches = {name: Bench(name == "on", ipl, args.every, root, xs, ys) for name in ("off", "on")}
            for b in benches.values():
                b.train(2 * ipl)  # warm-up: imports, caches, the first checkpoint
            runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
            for rep in range(args.repeats):
                for name, b in benches.items():
                    runs[name].append(b.train(steps))
                print(
                    f"ipl {ipl:>3} rep {rep}: "
                    + "  ".join(
                        f"{n} steady {r[-1]['steady']:.3f}s call {r[-1]['call']:.3f}s"
                        for n, r in runs.items()
                    )
                )
            row: dict[str, Any] = {}
            for kind in ("steady", "call"):
                off, on = (summary([r[kind] for r in runs[n]], steps) for n in ("off", "on"))
                row[kind] = {
                    "off": off,
                    "on": on,
                    "ratio_on_off": on["median_s"] / off["median_s"],
                    "overhead_ms_per_loop": 1e3 * (on["median_s"] - off["median_s"]) / (steps // ipl),
                }
            row["loss_max_abs_diff"] = max(
                abs(a["loss"] - b["loss"]) for a, b in zip(*runs.values(), strict=True)
            )
            results[str(ipl)] = row

    print(
        f"\n{'ipl':>4} {'timed':<7}{'off med s':>10}{'min':>7}{'max':>7}{'on med s':>10}{'min':>7}{'max':>7}"
        f"{'on/off':>8}{'+ms/loop':>10}"
    )
    for ipl, row in results.items():
        for kind in ("steady", "call"):
            r = row[kind]
            off, on = r["off"], r["on"]
            print(
                f"{ipl:>4} {kind:<7}{off['median_s']:>10.3f}{off['min_s']:>7.3f}{off['max_s']:>7.3f}"
                f"{on['median_s']:>10.3f}{on['min_s']:>7.3f}{on['max_s']:>7.3f}{r['ratio_on_off']:>8.2f}"
                f"{r['overhead_ms_per_loop']:>10.2f}"
            )
    print(
        "final loss on vs off, max |diff|: "
        + ", ".join(f"ipl {ipl} {row['loss_max_abs_diff']:.1e}" for ipl, row in results.items())
    )

    result = {
        "config": {
            "steps": steps,
            "repeats": args.repeats,
            "iterations_per_loop": args.ipl,
            "every": args.every,
            "global_batch": BATCH,
            "devices": jax.device_count(),
            "platform": jax.devices()[0].platform,
            "jax": jax.__version__,
            "jaxspec": jaxspec.__version__,
        },
        "iterations_per_loop": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
