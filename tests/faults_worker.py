"""One process of the fault tests (4 CPU devices each, gloo collectives on 127.0.0.1).

Usage: python tests/faults_worker.py MODEL_DIR OUT_JSON MAX_STEPS HEARTBEAT_SECS [SIGNALS]
(TF_CONFIG names the cluster; SIGNALS: RunConfig.preemption_signals, names joined by
commas, default SIGTERM). TPUEstimator trains a linear regression by SGD, the
gradients averaged over the 8 replicas, on one fixed global batch that the two hosts
feed half each; a checkpoint every SAVE_STEPS steps; each step's after_run sleeps
STEP_SLEEP_SECS and prints ``at step N`` (so a test can kill a process mid-training).
The chief writes the final variables to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

if __name__ == "__main__":  # the test imports this module too; only a worker gets 4 devices
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np

import jaxspec

GLOBAL_BATCH, DIM, LR, SAVE_STEPS, STEP_SLEEP_SECS = 16, 4, 0.05, 10, 0.05
TRUE_W = np.array([1.0, -2.0, 3.0, 0.5], np.float32)


def data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(7).normal(size=(GLOBAL_BATCH, DIM)).astype(np.float32)
    return x, (x @ TRUE_W + 0.1).astype(np.float32)


def hand_params(steps: int) -> dict[str, np.ndarray]:
    """The same SGD by hand (numpy, float64) on the whole global batch, from zeros."""
    x, y = data()
    w, b = np.zeros(DIM), 0.0
    for _ in range(steps):
        r = x @ w + b - y
        w, b = w - LR * 2 * x.T @ r / GLOBAL_BATCH, b - LR * 2 * r.mean()
    return {"w": w, "b": np.asarray(b)}


def init_fn():
    return {"w": jnp.zeros(DIM, jnp.float32), "b": jnp.zeros((), jnp.float32)}


def model_fn(features, labels, mode, params, state):
    def loss_of(s):
        return jnp.mean((features["x"] @ s["w"] + s["b"] - labels) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(state)
    grads = jax.lax.pmean(grads, "replica")  # every replica holds an equal share of the batch
    new = jax.tree.map(lambda p, g: p - LR * g, state, grads)
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=new)


def input_fn(params):
    x, y = data()
    ctx, b = params["context"], params["batch_size"]  # b: this host's share of the batch
    rows = slice(ctx.current_host * b, ctx.current_host * b + b)
    while True:
        yield {"x": x[rows]}, y[rows]


class SlowSteps(jaxspec.SessionRunHook):
    """Sleeps after every step and prints its global step."""

    def after_run(self, run_context, run_values):
        time.sleep(STEP_SLEEP_SECS)
        print(f"at step {run_context.session.global_step}", flush=True)


def estimator(
    model_dir: str, heartbeat: float, signals: tuple[int, ...] = (signal.SIGTERM,)
) -> jaxspec.TPUEstimator:
    config = jaxspec.RunConfig(
        preemption_signals=signals,
        model_dir=model_dir,
        save_checkpoints_steps=SAVE_STEPS,
        log_step_count_steps=None,
        save_summary_steps=0,
        keep_checkpoint_max=None,
        heartbeat_timeout_secs=heartbeat,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=1),
    )
    return jaxspec.TPUEstimator(model_fn, config=config, train_batch_size=GLOBAL_BATCH, init_fn=init_fn)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
    model_dir, out, max_steps, heartbeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    names = sys.argv[5].split(",") if len(sys.argv) > 5 else ["SIGTERM"]
    est = estimator(model_dir, heartbeat, tuple(signal.Signals[name] for name in names))
    est.train(input_fn, hooks=[SlowSteps()], max_steps=max_steps)
    values = {name: est.get_variable_value(name).tolist() for name in ("w", "b", "global_step")}
    if jax.process_index() == 0:  # every process reads (the checkpoint lookup is collective)
        with open(out, "w") as f:
            json.dump(values, f)
    print("finished", flush=True)
