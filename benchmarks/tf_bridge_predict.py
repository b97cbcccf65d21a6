"""What a 1-row ``predict()`` of a TF1 model_fn costs through tf_bridge, after the first
call, with the kept predict graph (the default) and with the per-call graph tf.estimator
built every time (forced here by passing a no-op hook), measured in the same run.

  .venv/bin/python benchmarks/tf_bridge_predict.py [--calls 50] [--out PATH]

Prints both medians (ms), the kept path's CPU time per call (this process, all threads:
on a loaded machine the wall time also counts waiting for a core), the first call's time, the ratio per-call / kept and the median
time of the input_fn alone (building its Dataset, part of every call, the user's own cost);
checks that both paths give the same outputs, before and after one more training step
(a new checkpoint, which the kept graph must pick up); writes JSON (default
``benchmarks/results/tf_bridge_predict.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_bridge  # noqa: E402

ROW = np.array([[0.25, -1.0, 0.5]], np.float32)


def model_fn(features: Any, labels: Any, mode: str) -> Any:
    """A two-layer TF1 regressor (tf.compat.v1 variables and ops)."""
    hidden = tf.compat.v1.get_variable(
        "h", [3, 16], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1)
    )
    out = tf.compat.v1.get_variable("o", [16, 1], initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
    pred = tf.matmul(tf.nn.relu(tf.matmul(features["x"], hidden)), out)[:, 0]
    if mode == tf_bridge.ModeKeys.PREDICT:
        return tf_bridge.EstimatorSpec(mode, predictions={"y": pred})
    loss = tf.reduce_mean(tf.square(pred - labels))
    step = tf.compat.v1.train.get_global_step()
    return tf_bridge.EstimatorSpec(
        mode, loss=loss, train_op=tf.compat.v1.train.AdamOptimizer(1e-2).minimize(loss, global_step=step)
    )


def train_input_fn() -> Any:
    x = np.random.RandomState(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, x.sum(1))).batch(16).repeat(3)


def predict_input_fn() -> Any:
    return tf.data.Dataset.from_tensor_slices({"x": ROW}).batch(1)


def timed_calls(
    est: Any, calls: int, hooks: list[Any] | None, cpu: list[float] | None = None
) -> tuple[list[float], list[float]]:
    """Seconds per ``list(est.predict(...))`` call and the last prediction; the CPU
    seconds of each call (this process, every thread) are appended to ``cpu``."""
    times, last = [], []
    for _ in range(calls):
        start, cpu_start = time.perf_counter(), time.process_time()
        last = [p["y"] for p in est.predict(predict_input_fn, hooks=hooks)]
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(time.process_time() - cpu_start)
    return times, last


def input_fn_ms(calls: int) -> float:
    """Median milliseconds of ``predict_input_fn()`` alone."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        predict_input_fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "tf_bridge_predict.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as model_dir:
        est = tf_bridge.Estimator(model_fn, model_dir, config=tf_bridge.RunConfig(tf_random_seed=0))
        est.train(train_input_fn)
        kept_cpu: list[float] = []
        kept, kept_pred = timed_calls(est, args.calls + 1, None, kept_cpu)
        per_call, per_call_pred = timed_calls(est, args.calls + 1, [tf.compat.v1.train.SessionRunHook()])
        np.testing.assert_allclose(kept_pred, per_call_pred, rtol=1e-6)  # the same outputs
        est.train(train_input_fn, steps=1)  # a new checkpoint
        _, kept_new = timed_calls(est, 1, None)
        _, per_call_new = timed_calls(est, 1, [tf.compat.v1.train.SessionRunHook()])
        np.testing.assert_allclose(kept_new, per_call_new, rtol=1e-6)
        assert not np.allclose(kept_new, kept_pred), "the new checkpoint was not picked up"
    result = {
        "calls": args.calls,
        "kept_first_ms": 1e3 * kept[0],
        "kept_median_ms": 1e3 * statistics.median(kept[1:]),
        "kept_cpu_median_ms": 1e3 * statistics.median(kept_cpu[1:]),
        "per_call_median_ms": 1e3 * statistics.median(per_call[1:]),
        "per_call_over_kept": statistics.median(per_call[1:]) / statistics.median(kept[1:]),
        "input_fn_median_ms": input_fn_ms(args.calls),
        "new_checkpoint_picked_up": True,
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
    }
    print(
        f"1-row predict after the first, median of {args.calls}: kept graph {result['kept_median_ms']:.2f} ms "
        f"(CPU {result['kept_cpu_median_ms']:.2f} ms; first call {result['kept_first_ms']:.1f} ms), per-call graph {result['per_call_median_ms']:.2f} ms; "
        f"per-call / kept = {result['per_call_over_kept']:.1f}x; the input_fn alone {result['input_fn_median_ms']:.2f} ms; "
        "same outputs, new checkpoint picked up"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
