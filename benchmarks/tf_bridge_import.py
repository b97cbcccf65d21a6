"""What ``import tf_bridge`` costs next to ``import tensorflow``: wall time and CPU time
(user + system, this process) of the import statement and the process's peak resident
memory after it, each in a fresh interpreter, the two alternating, medians over the
repeats. On a shared, loaded machine the wall time mostly measures the other processes;
the CPU time is the import's own work.

  .venv/bin/python benchmarks/tf_bridge_import.py [--repeats 5] [--out PATH]

Prints both ratios (tf_bridge / tensorflow) and what ``import tf_bridge`` adds once
TensorFlow is imported (timed alone, the same way); writes JSON (default
``benchmarks/results/tf_bridge_import.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, resource, sys, time
{before}
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start, cpu_start = time.perf_counter(), cpu()
import {module}
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu_start
print("PROBE", json.dumps({{"seconds": seconds, "cpu_seconds": cpu_seconds,
                           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                           "tensorflow_imported": "tensorflow" in sys.modules}}))
"""


def probe(module: str, before: str = "") -> dict[str, float]:
    """Import ``module`` in a fresh interpreter (this checkout first on sys.path), after
    the untimed statement ``before``."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    code = PROBE.format(module=module, before=before)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "tf_bridge_import.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"tensorflow": [], "tf_bridge": []}
    for _ in range(args.repeats):
        for module in runs:
            runs[module].append(probe(module))
    after_tf = [probe("tf_bridge", "import tensorflow")["seconds"] for _ in range(args.repeats)]
    medians = {
        module: {
            key: statistics.median(r[key] for r in rs) for key in ("seconds", "cpu_seconds", "peak_rss_mb")
        }
        for module, rs in runs.items()
    }
    result = {
        "repeats": args.repeats,
        "median": medians,
        "time_ratio": medians["tf_bridge"]["seconds"] / medians["tensorflow"]["seconds"],
        "cpu_time_ratio": medians["tf_bridge"]["cpu_seconds"] / medians["tensorflow"]["cpu_seconds"],
        "memory_ratio": medians["tf_bridge"]["peak_rss_mb"] / medians["tensorflow"]["peak_rss_mb"],
        "tf_bridge_after_tensorflow_s": statistics.median(after_tf),
        "runs": runs,
    }
    print(
        f"import tensorflow: {medians['tensorflow']['seconds']:.2f} s, {medians['tensorflow']['peak_rss_mb']:.0f} MB; "
        f"import tf_bridge: {medians['tf_bridge']['seconds']:.2f} s, {medians['tf_bridge']['peak_rss_mb']:.0f} MB; "
        f"ratios (tf_bridge / tensorflow): time {result['time_ratio']:.2f}x, CPU time {result['cpu_time_ratio']:.2f}x "
        f"({medians['tensorflow']['cpu_seconds']:.2f} s / {medians['tf_bridge']['cpu_seconds']:.2f} s), "
        f"memory {result['memory_ratio']:.2f}x; "
        f"import tf_bridge with tensorflow already imported: {1e3 * result['tf_bridge_after_tensorflow_s']:.1f} ms"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
