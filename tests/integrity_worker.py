"""One process of the 2-process integrity test (4 CPU devices each, gloo on 127.0.0.1).

Usage: python tests/integrity_worker.py MODEL_DIR OUT_JSON, with JAXSPEC_TEST_PHASE
``train`` (train 4 steps: checkpoints at global steps 0 and 4) or ``check`` (every process
looks for the newest intact checkpoint together, then evaluates from it). Writes the step
found, the evaluated global step and the files this process checksummed.
"""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxspec.store import checkpoint_integrity  # noqa: E402
from tests import multiprocess_worker as worker  # noqa: E402

if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    import jax

    est = worker.make_estimator(model_dir, [])
    store = est._checkpoint_store()  # joins the cluster (jax.distributed) before JAX starts
    result: dict = {"process": jax.process_index()}
    if os.environ["JAXSPEC_TEST_PHASE"] == "train":
        est.train(worker.train_input_fn, steps=4)
    else:
        checked: list[str] = []
        real = checkpoint_integrity._checksums

        def recording(jobs):
            checked.extend(os.path.relpath(job[0], store.directory) for job in jobs)
            return real(jobs)

        checkpoint_integrity._checksums = recording
        result["latest"] = store.latest_step(collective=True)
        result["checked"] = sorted(set(checked))
        result["evaluated_step"] = int(est.evaluate(worker.eval_input_fn)["global_step"])
    with open(out, "w") as f:
        json.dump(result, f)
