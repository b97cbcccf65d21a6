"""Run a worker script as two JAX processes (chief + worker, TF_CONFIG on 127.0.0.1) and
collect the JSON each writes: the harness of the multi-process tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_two_processes(args_of: Any) -> list[subprocess.Popen]:
    """Start ``python *args_of(kind)`` as the chief and the worker of a two-task TF_CONFIG
    cluster on 127.0.0.1 (XLA_FLAGS dropped: the script sets its own), stdout and stderr
    together on one text pipe each; returns ``[chief, worker]``, still running."""
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    procs = []
    for kind in ("chief", "worker"):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
        env.pop("XLA_FLAGS", None)
        cmd = [sys.executable, *args_of(kind)]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    return procs


def run_two_processes(
    script: str, model_dir: str, out_dir: Any, tag: str = "", timeout: int = 420
) -> list[dict]:
    """``script MODEL_DIR OUT_JSON`` as the chief and the worker of a two-task TF_CONFIG
    cluster (each process sees 4 CPU devices: XLA_FLAGS is dropped, the script sets
    its own); returns ``[chief's json, worker's json]``.

    Raises:
      AssertionError: a process failed (its output's tail is shown).
    """
    port = free_port()
    cluster = {"chief": [f"127.0.0.1:{port}"], "worker": [f"127.0.0.1:{port + 1}"]}
    procs = []
    for kind in ("chief", "worker"):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
        env.pop("XLA_FLAGS", None)
        out = os.path.join(str(out_dir), f"{kind}{tag}.json")
        cmd = [sys.executable, script, model_dir, out]
        procs.append(
            (subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out)
        )
    results = []
    for proc, out in procs:
        log, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, log[-4000:]
        with open(out) as f:
            results.append(json.load(f))
    return results
