"""Pieces the training benchmarks share: the digits batches and a per-loop clock hook."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.monitoring
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from sklearn.datasets import load_digits

import jaxspec


def digits_batches(steps: int, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` global batches from shuffled epochs of the digits: x float32
    ``[steps, batch, 64]`` in [0, 1] and y int32 ``[steps, batch]``."""
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    rng, xs, ys = np.random.RandomState(seed), [], []
    while len(xs) < steps:
        idx = rng.permutation(len(x))
        for s in range(0, len(idx) - batch + 1, batch):
            xs.append(x[idx[s : s + batch]])
            ys.append(y[idx[s : s + batch]])
    return np.stack(xs[:steps]), np.stack(ys[:steps])


class LoopClock(jaxspec.SessionRunHook):
    """Records ``time.perf_counter()`` (seconds) and the loss at the end of every loop."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.losses: list[float] = []

    def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
        """Fetch the loss."""
        return jaxspec.SessionRunArgs("loss")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Record the time and the loss."""
        self.times.append(time.perf_counter())
        self.losses.append(float(run_values.results))


# -- the per-call benchmarks (call_overhead.py, cold_start.py) --------------------------------
MLP_LR = 1e-2
MLP_BATCH = 128
#: RunConfig arguments that turn off every periodic checkpoint, summary and step log.
QUIET_CONFIG = {
    "save_checkpoints_steps": None,
    "save_checkpoints_secs": None,
    "save_summary_steps": None,
    "log_step_count_steps": None,
}


class DigitsMLP(nn.Module):
    """64 inputs, Dense(128)-relu-Dense(10): logits ``[batch, 10]``."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(10)(nn.relu(nn.Dense(128)(x)))


def mlp_loss(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross entropy of the MLP on a batch (x float32 [b, 64], y int32 [b])."""
    return optax.softmax_cross_entropy_with_integer_labels(DigitsMLP().apply(params, x), y).mean()


def mlp_params(seed: int = 0) -> Any:
    """The MLP's initial parameters, the same for every caller with the same seed."""
    return DigitsMLP().init(jax.random.PRNGKey(seed), np.zeros((1, 64), np.float32))


def mlp_state(seed: int = 0, cross_shard: bool = False) -> train_state.TrainState:
    """``init_fn`` of the jaxspec side: a TrainState of ``mlp_params(seed)`` and adam(1e-2)
    (wrapped in ``CrossShardOptimizer`` for a mesh, so the replicas stay equal)."""
    tx = optax.adam(MLP_LR)
    return train_state.TrainState.create(
        apply_fn=DigitsMLP().apply,
        params=mlp_params(seed),
        tx=jaxspec.CrossShardOptimizer(tx) if cross_shard else tx,
    )


class CountingModelFn:
    """The MLP's model_fn, counting its calls (each call is one trace of model_fn).

    ``spec`` is the class it returns (EstimatorSpec for Estimator, TPUEstimatorSpec for
    TPUEstimator). TRAIN: adam step on the batch loss; EVAL: the loss; PREDICT: ``class_ids`` and ``probabilities``.
    """

    def __init__(self, spec: type = jaxspec.EstimatorSpec) -> None:
        self.spec = spec
        self.calls = 0

    def __call__(self, features: Any, labels: Any, mode: str, params: Any, state: Any) -> Any:
        self.calls += 1
        logits = DigitsMLP().apply(state.params, features["x"])
        if mode == jaxspec.ModeKeys.PREDICT:
            return self.spec(
                mode, predictions={"class_ids": logits.argmax(-1), "probabilities": jax.nn.softmax(logits)}
            )
        loss, grads = jax.value_and_grad(mlp_loss)(state.params, features["x"], labels)
        if mode == jaxspec.ModeKeys.TRAIN:
            return self.spec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))
        return self.spec(mode, loss=loss)


def hand_train_step() -> Any:
    """The hand-written side's one-step function, ``jax.jit``-ed: ``(params, opt_state, x,
    y) -> (params, opt_state, loss)`` with adam(1e-2), the same math as CountingModelFn."""
    tx = optax.adam(MLP_LR)

    @jax.jit
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


class OrbaxFinalSave:
    """The final checkpoint a hand-written loop would write to leave its state on disk,
    as a ``train()`` call does: one Orbax ``CheckpointManager`` save per call into
    ``directory`` (the settings jaxspec's store uses by default: asynchronous, keep the
    newest 5), waited for before the call counts as done. Plain Orbax, no jaxspec code."""

    def __init__(self, directory: str) -> None:
        options = ocp.CheckpointManagerOptions(max_to_keep=5, create=True, enable_async_checkpointing=True)
        self.manager = ocp.CheckpointManager(directory, options=options)
        self.step = 0

    def __call__(self, tree: Any) -> None:
        """Save ``tree`` (a pytree of arrays) as the next step and wait until it is on disk."""
        self.step += 1
        self.manager.save(self.step, args=ocp.args.StandardSave(tree))
        self.manager.wait_until_finished()


def time_summary(times: list[float], work: float, unit: str, base: float | None = None) -> dict[str, Any]:
    """Median/min/max seconds of repeated runs, ``work / median`` as ``<unit>_per_s``, and
    ``ratio_vs_baseline`` = baseline median / this median (throughput ratio: 1 = as fast)."""
    med = statistics.median(times)
    row: dict[str, Any] = {
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        f"{unit}_per_s": work / med,
        "times_s": times,
    }
    if base is not None:
        row["ratio_vs_baseline"] = base / med
    return row


def write_json(path: str | Path, result: dict[str, Any]) -> None:
    """Write ``result`` as indented JSON, creating the folder."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(f"wrote {out}")


class CompileEvents:
    """What XLA did, from ``jax.monitoring`` events (registered once per process)."""

    BACKEND = "/jax/core/compile/backend_compile_duration"
    TRACE = "/jax/core/compile/jaxpr_trace_duration"
    LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
    HIT = "/jax/compilation_cache/cache_hits"
    MISS = "/jax/compilation_cache/cache_misses"

    def __init__(self) -> None:
        self.reset()
        jax.monitoring.register_event_listener(self._on_event)
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)

    def reset(self) -> None:
        self.executables: list[dict[str, Any]] = []
        self.hits = self.misses = 0
        self.trace_s = self.lower_s = 0.0
        self._hit_pending = False

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if event == self.HIT:
            self.hits += 1
            self._hit_pending = True  # recorded inside the backend-compile span that follows
        elif event == self.MISS:
            self.misses += 1

    def _on_duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        if event == self.BACKEND:
            name = str(kwargs.get("fun_name", "?"))
            self.executables.append({"fun": name, "s": duration_secs, "cache_hit": self._hit_pending})
            self._hit_pending = False
        elif event == self.TRACE:
            self.trace_s += duration_secs
        elif event == self.LOWER:
            self.lower_s += duration_secs

    def summary(self) -> dict[str, Any]:
        compiled = [e for e in self.executables if not e["cache_hit"]]
        return {
            "executables": len(self.executables),
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "xla_compiles": len(compiled),
            "compile_s": sum(e["s"] for e in compiled),
            "cache_fetch_s": sum(e["s"] for e in self.executables if e["cache_hit"]),
            "trace_s": self.trace_s,
            "lower_s": self.lower_s,
            "slowest": sorted(self.executables, key=lambda e: -e["s"])[:5],
        }
