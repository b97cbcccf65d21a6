"""Checkpoint save and restore to a gs:// bucket: jaxspec's CheckpointStore against Orbax's
own StandardCheckpointer, same tree, same emulator, same run.

A 412 MiB state (8 float32 leaves of 51.5 MiB on one device) is saved and restored with
each, alternating, ``--repeats`` times, to a GCS emulator (fake-gcs-server on 127.0.0.1,
``tests/gcs_emulator.py``). jaxspec's save includes what it adds over Orbax: the
integrity record of every file (on GCS, from the store's own CRC-32C: one listing) and the
commit through a CheckpointManager; its restore includes the integrity check of the
records. Medians are compared: goal <= 1.25x each. Writes JSON (``--out``) and prints the
ratios.

Usage: python benchmarks/gcs_checkpoint.py [--repeats 3] [--out gcs_checkpoint.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

from tests.gcs_emulator import GcsEmulator, point_clients_at  # noqa: E402

LEAVES, LEAF_FLOATS = 8, 13_500_000  # 8 x 51.5 MiB = 412 MiB


def _state() -> dict:
    rng = np.random.default_rng(0)
    return {f"layer_{i}": jax.device_put(rng.random(LEAF_FLOATS, np.float32)) for i in range(LEAVES)}


def _abstract(state: dict) -> dict:
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


RECORDS: list[int] = []  # piece_bytes of each jaxspec record: WHOLE_OBJECT = the store's CRC-32C


def _jaxspec_round(url: str, state: dict) -> tuple[float, float]:
    from jaxspec.store import paths
    from jaxspec.store.checkpoints import CheckpointStore

    store = CheckpointStore(url, keep_checkpoint_max=None)
    start = time.perf_counter()
    store.save(1, state)
    store.wait()
    saved = time.perf_counter() - start
    start = time.perf_counter()
    restored = store.restore(store.latest_step(), state)  # latest_step: the integrity check
    jax.block_until_ready(restored)
    loaded = time.perf_counter() - start
    store.close()
    RECORDS.append(
        json.loads(paths.read_bytes(paths.join(store.path(1), "jaxspec_digest.json")))["piece_bytes"]
    )
    assert np.array_equal(np.asarray(restored["layer_0"]), np.asarray(state["layer_0"]))
    return saved, loaded


def _orbax_round(url: str, state: dict) -> tuple[float, float]:
    from etils import epath

    path = epath.Path(url) / "1"
    checkpointer = ocp.StandardCheckpointer()
    start = time.perf_counter()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    saved = time.perf_counter() - start
    start = time.perf_counter()
    restored = checkpointer.restore(path, _abstract(state))
    jax.block_until_ready(restored)
    loaded = time.perf_counter() - start
    checkpointer.close()
    assert np.array_equal(np.asarray(restored["layer_0"]), np.asarray(state["layer_0"]))
    return saved, loaded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="gcs_checkpoint.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        emulator = GcsEmulator(os.path.join(tmp, "server"))
        emulator.start()
        emulator.create_bucket("bench")
        point_clients_at(emulator.url)
        from jaxspec.store import paths

        try:
            state = _state()
            times: dict[str, list[float]] = {k: [] for k in ("jaxspec_save", "jaxspec_restore")}
            times.update({"orbax_save": [], "orbax_restore": []})
            for r in range(args.repeats):
                for name, run in (("orbax", _orbax_round), ("jaxspec", _jaxspec_round)):
                    url = f"gs://bench/{name}-{r}"
                    save, restore = run(url, state)
                    times[f"{name}_save"].append(save)
                    times[f"{name}_restore"].append(restore)
                    paths.rmtree(url)  # the emulator keeps objects on local disk
        finally:
            emulator.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "state_mib": LEAVES * LEAF_FLOATS * 4 / 2**20,
        "repeats": args.repeats,
        "seconds": times,
        "median_seconds": med,
        "save_ratio": med["jaxspec_save"] / med["orbax_save"],
        "restore_ratio": med["jaxspec_restore"] / med["orbax_restore"],
        "record_piece_bytes": RECORDS,
        "load_average": os.getloadavg(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(
        f"{result['state_mib']:.0f} MiB to the emulator, medians of {args.repeats}: "
        f"save jaxspec {med['jaxspec_save']:.2f} s / Orbax {med['orbax_save']:.2f} s = "
        f"{result['save_ratio']:.2f}x; restore jaxspec {med['jaxspec_restore']:.2f} s / Orbax "
        f"{med['orbax_restore']:.2f} s = {result['restore_ratio']:.2f}x (goal <= 1.25x each)"
    )


if __name__ == "__main__":
    main()
