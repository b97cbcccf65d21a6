"""What jaxspec.loop.replica_check costs per check: a replicated state of LEAVES leaves
(PARAMS float32 values in all) on 8 virtual CPU devices.

Usage: python benchmarks/replica_check_cost.py [LEAVES] [PARAMS]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from jaxspec.loop.replica_check import ReplicaCheck  # noqa: E402


def main() -> None:
    leaves, params = (int(a) for a in (sys.argv[1:] + ["100", "4000000"])[:2])
    mesh = Mesh(np.array(jax.devices()), ("replica",))
    rep = NamedSharding(mesh, PartitionSpec())
    state = {f"w{i}": jax.device_put(np.ones(params // leaves, np.float32), rep) for i in range(leaves)}
    jax.block_until_ready(state)
    for k in range(6):
        check = ReplicaCheck(mesh)
        start = time.perf_counter()
        check.finish(state, 0)
        print(f"check {k}: {1e3 * (time.perf_counter() - start):.2f} ms")


if __name__ == "__main__":
    main()
