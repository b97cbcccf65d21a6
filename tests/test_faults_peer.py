"""A lost peer (issue 45): one of two processes is SIGKILLed mid-training; the survivor
logs one ERROR naming it and the newest checkpoint, exits with the peer watch's status
within heartbeat_timeout_secs plus the documented slack, the model_dir stays intact, and
relaunching both resumes to the variables of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np

from jaxspec.loop import peer_watch
from tests import faults_worker as job
from tests.two_processes import start_two_processes

SCRIPT = os.path.join(os.path.dirname(__file__), "faults_worker.py")
HEARTBEAT = 3


def _launch(model_dir: str, out_dir: str, max_steps: int) -> list[subprocess.Popen]:
    return start_two_processes(
        lambda kind: [
            SCRIPT,
            model_dir,
            os.path.join(out_dir, f"{kind}.json"),
            str(max_steps),
            str(HEARTBEAT),
        ]
    )


def _wait_for_step(proc: subprocess.Popen, step: int) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("at step ") and int(line.split()[2]) >= step:
            return "".join(seen)
    raise AssertionError("".join(seen)[-4000:])


def _kill_one_and_time_the_other(tmp_path, victim: int) -> tuple[int | None, str, float]:
    model_dir, out_dir = str(tmp_path / "run"), str(tmp_path)
    procs = _launch(model_dir, out_dir, 100_000)
    survivor = procs[1 - victim]
    head = _wait_for_step(survivor, 25)
    procs[victim].send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    try:
        out, _ = survivor.communicate(timeout=HEARTBEAT + peer_watch.SLACK_SECS + 60)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return survivor.returncode, head + out, time.perf_counter() - killed


def test_a_killed_worker_ends_the_chief_with_the_lost_peer_status_and_a_relaunch_resumes(tmp_path):
    status, log, waited = _kill_one_and_time_the_other(tmp_path, victim=1)
    print(f"worker SIGKILLed -> chief exits {status} after {waited:.2f} s (heartbeat {HEARTBEAT} s)")
    assert status == peer_watch.EXIT_STATUS, log[-4000:]
    assert waited < HEARTBEAT + peer_watch.SLACK_SECS, log[-4000:]
    errors = [line for line in log.splitlines() if line.startswith("ERROR:jaxspec:Lost ")]
    assert len(errors) == 1, log[-4000:]
    assert "Lost worker 0 (process 1 of 2) of the 2 processes" in errors[0]
    assert "relaunch all 2 processes" in errors[0]
    assert f"status {peer_watch.EXIT_STATUS}" in errors[0]
    newest = errors[0].split("Newest checkpoint: ")[1].split(". To resume")[0]
    model_dir = str(tmp_path / "run")
    assert newest.startswith(os.path.join(model_dir, "")), errors[0]
    saved = int(os.path.basename(newest))
    assert saved >= 20 and saved % job.SAVE_STEPS == 0, errors[0]

    # the model_dir is intact: every checkpoint passes its integrity records
    from jaxspec.store.checkpoints import CheckpointStore

    store = CheckpointStore(model_dir, None, 10000.0)
    assert store.latest_step() >= saved
    assert all(store.damage(step) is None for step in store.all_steps()), store.all_steps()

    # relaunch both: resumes from the newest checkpoint and ends at an uninterrupted run's values
    final = saved + 20
    procs = _launch(model_dir, str(tmp_path), final)
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    with open(tmp_path / "chief.json") as f:
        got = json.load(f)
    hand = job.hand_params(final)
    assert got["global_step"] == final
    np.testing.assert_allclose(got["w"], hand["w"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["b"], hand["b"], rtol=1e-5, atol=1e-5)


def test_a_killed_chief_does_not_leave_the_worker_hanging(tmp_path):
    """Process 0 hosts JAX's coordination service: the worker loses it with the chief.
    It must end (JAX's own abort may come before the watch's report: see docs/cluster.md)."""
    status, log, waited = _kill_one_and_time_the_other(tmp_path, victim=0)
    print(f"chief SIGKILLed -> worker exits {status} after {waited:.2f} s (heartbeat {HEARTBEAT} s)")
    assert status in (peer_watch.EXIT_STATUS, -signal.SIGABRT), log[-4000:]
    assert waited < HEARTBEAT + peer_watch.SLACK_SECS, log[-4000:]
