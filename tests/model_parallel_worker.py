"""One process of the 2-process model-parallel test (4 CPU devices each, k=2: a 4x2 mesh
over both processes). Usage: python tests/model_parallel_worker.py MODEL_DIR OUT_JSON
(TF_CONFIG names the cluster). Inputs are tests/multiprocess_worker.py's (PER_HOST_V1)."""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":  # only a worker gets 4 devices
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxspec
from tests.model_parallel_models import MLP_RULES, Mlp, StateProbe, config, make_init_fn, make_model_fn
from tests.multiprocess_worker import (
    EVAL_BATCH,
    STEPS,
    TRAIN_BATCH,
    eval_input_fn,
    eval_rows,
    predict_input_fn,
    train_input_fn,
)


def make_estimator(model_dir: str, host_losses: list) -> jaxspec.TPUEstimator:
    return jaxspec.TPUEstimator(
        make_model_fn(host_losses),
        config=config(model_dir, 2, iterations_per_loop=4),
        train_batch_size=TRAIN_BATCH,
        eval_batch_size=EVAL_BATCH,
        predict_batch_size=EVAL_BATCH,
        init_fn=make_init_fn(Mlp()),
        partition_rules=MLP_RULES,
    )


if __name__ == "__main__":
    import jax

    model_dir, out = sys.argv[1], sys.argv[2]
    host_losses: list = []
    probe = StateProbe()
    est = make_estimator(model_dir, host_losses)
    est.train(train_input_fn, steps=STEPS, hooks=[probe])
    kernel = probe.final.params["params"]["Dense_0"]["kernel"]
    context = type("Context", (), {"current_host": jax.process_index()})()
    rows = [int(r) for part in eval_rows({"context": context, "batch_size": EVAL_BATCH // 2}) for r in part]
    result = {
        "process": jax.process_index(),
        "mesh": dict(est._mesh().shape),
        "kernel_spec": [str(a) for a in kernel.sharding.spec],
        "kernel_local_shards": [list(s.data.shape) for s in kernel.addressable_shards],
        "metrics": {k: float(v) for k, v in est.evaluate(eval_input_fn).items()},
        "logits": [p["logits"].tolist() for p in est.predict(predict_input_fn)],
        "rows": rows,  # the examples this process fed, in the order of its predictions
        "host_call_losses": [x.tolist() for x in host_losses],
        "params": {k: v.tolist() for k, v in est._checkpoint_store().read().items()},
    }
    with open(out, "w") as f:
        json.dump(result, f)
