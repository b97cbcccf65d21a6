"""One process of the 2-process tests (4 CPU devices each, gloo collectives on 127.0.0.1).

Usage: python tests/multiprocess_worker.py MODEL_DIR OUT_JSON (TF_CONFIG names the cluster).
Trains, evaluates and predicts the test MLP with PER_HOST_V1 input: this process feeds
its half of every global batch, so the global batches equal the one-process run's.
"""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":  # the test imports this module too; only a worker gets 4 devices
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import jaxspec
from tests.helpers import digits, init_fn, make_model_fn

TRAIN_BATCH, EVAL_BATCH, STEPS, N_EVAL = 64, 16, 6, 37


def make_estimator(model_dir: str, host_calls: list) -> jaxspec.TPUEstimator:
    config = jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tf_random_seed=1,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=4),
    )
    return jaxspec.TPUEstimator(
        make_model_fn(host_calls),
        config=config,
        train_batch_size=TRAIN_BATCH,
        eval_batch_size=EVAL_BATCH,
        predict_batch_size=EVAL_BATCH,
        init_fn=init_fn,
    )


def train_input_fn(params):
    """Global batch k is rows [64k, 64k+64); this host feeds its share of it."""
    x, y = digits(TRAIN_BATCH * STEPS)
    ctx, b = params["context"], params["batch_size"]
    for k in range(STEPS):
        start = TRAIN_BATCH * k + ctx.current_host * b
        yield {"x": x[start : start + b]}, y[start : start + b]


def eval_rows(params):
    """Global eval batch k is rows [16k, 16k+16) of the 37; this host reads its part."""
    ctx, b = params["context"], params["batch_size"]
    starts = [s + ctx.current_host * b for s in range(0, N_EVAL, EVAL_BATCH)]
    return [np.arange(s, min(s + b, N_EVAL)) for s in starts if s < N_EVAL]


def eval_input_fn(params):
    x, y = digits(N_EVAL)
    return (({"x": x[r]}, y[r]) for r in eval_rows(params))


def predict_input_fn(params):
    x, _ = digits(N_EVAL)
    return ({"x": x[r]} for r in eval_rows(params))


if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    host_calls: list = []
    est = make_estimator(model_dir, host_calls)
    est.train(train_input_fn, steps=STEPS)
    metrics = est.evaluate(eval_input_fn)
    import jax

    host = jax.process_index()
    context = type("Context", (), {"current_host": host})()
    my_rows = np.concatenate(eval_rows({"context": context, "batch_size": EVAL_BATCH // jax.process_count()}))
    preds = [p["logits"].tolist() for p in est.predict(predict_input_fn)]
    params = est._checkpoint_store().read()
    import tensorflow as tf

    import tf_bridge

    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
    export = est.export_saved_model(os.path.join(model_dir, "export"), receiver)  # every process calls
    result = {
        "process": host,
        "processes": jax.process_count(),
        "devices": len(jax.devices()),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "rows": my_rows.tolist(),
        "logits": preds,
        "host_call_losses": [loss.tolist() for _, loss in host_calls],
        "host_call_steps": [int(step[0]) for step, _ in host_calls],
        "params": {k: v.tolist() for k, v in params.items()},
        "export": None if export is None else export.decode(),
    }
    with open(out, "w") as f:
        json.dump(result, f)
