"""One process of the 2-process gs:// test (4 CPU devices each, gloo on 127.0.0.1).

Usage: python tests/gcs_worker.py MODEL_DIR OUT_JSON, with JAXSPEC_TEST_GCS_URL naming the
emulator (tests/gcs_emulator.py). Trains the test MLP 4 steps into the gs:// model_dir
(both processes write their shards and records there) and writes the step it reached and
a kernel's value as it reads it back from the bucket.
"""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import multiprocess_worker as worker  # noqa: E402
from tests.gcs_emulator import point_clients_at  # noqa: E402

if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    point_clients_at(os.environ["JAXSPEC_TEST_GCS_URL"])
    import jax

    est = worker.make_estimator(model_dir, [])
    est.train(worker.train_input_fn, steps=4)
    values = est._checkpoint_store().read()  # this process alone reads the bucket back
    kernel = next(n for n in sorted(values) if n.endswith("kernel"))
    result = {"process": jax.process_index(), "latest": est._checkpoint_store().latest_step()}
    result.update(leaf=kernel, value=values[kernel].tolist())
    with open(out, "w") as f:
        json.dump(result, f)
