"""One process of the launcher tests: started by ``mpirun``, ``srun``, the variables ``srun``
sets, the ``JAX_*`` variables or a TFJob's TF_CONFIG (4 CPU devices each).

Usage: python tests/launcher_worker.py MODEL_DIR OUT_DIR. Trains the test MLP of
tests/multiprocess_worker.py with TPUEstimator(use_tpu=True) (this process feeds its half
of every global batch) and writes OUT_DIR/process_<jax.process_index()>.json.
"""

from __future__ import annotations

import json
import logging
import os
import sys

if __name__ == "__main__":  # only a worker gets 4 devices
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import multiprocess_worker as worker

STEPS = 4

if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s")  # root stays at WARNING
    logging.getLogger("jaxspec").setLevel(logging.INFO)  # the join's INFO line is checked
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    est = worker.make_estimator(model_dir, [])
    est.train(worker.train_input_fn, steps=STEPS)
    import jax

    from jaxspec.config.cluster import describe_process

    params = est._checkpoint_store().read()
    result = {
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "devices": len(jax.devices()),
        "local_devices": len(jax.local_devices()),
        "described": describe_process(),
        "params": {k: v.tolist() for k, v in params.items()},
    }
    with open(os.path.join(out_dir, f"process_{jax.process_index()}.json"), "w") as f:
        json.dump(result, f)
