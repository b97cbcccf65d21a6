"""SIGTERM during a grouped plain-Estimator loop: the group is cut within a bounded
number of steps, the checkpoint is saved, the status is 143, and resuming trains the
parameters of an uninterrupted run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

from tests import preemption_subprocess as job

SCRIPT = os.path.join(os.path.dirname(__file__), "preemption_subprocess.py")


def test_sigterm_cuts_a_group_short_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path):
    model_dir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, model_dir, "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    lines = []
    for line in proc.stdout:  # groups of 250 steps: the signal lands inside the group 250-500
        lines.append(line)
        if line.startswith("at step 250"):
            break
    time.sleep(0.1)  # into the group 250-500 (about 0.5 s of 2 ms steps), once it is dispatched
    proc.send_signal(signal.SIGTERM)
    signalled = time.perf_counter()
    out, _ = proc.communicate(timeout=120)
    waited = time.perf_counter() - signalled
    text = "".join(lines) + out
    assert proc.returncode == 143, text
    after = int(re.search(r"Steps run after the signal: (\d+)", text).group(1))
    cap = int(re.search(r"cap=(\d+)", text).group(1))
    assert 1 <= cap <= job.MAX_CAP, text
    # At most two dispatches (one running, one queued) of at most MAX_CAP steps each ran
    # after the signal; the group (to step 500) was not finished. The signal comes right
    # after the hook's step 250: the group after it may not be dispatched yet (stop at 250).
    assert after <= 2 * job.MAX_CAP, text
    stopped = int(re.search(r"Training stopped by SIGTERM at global step (\d+)", text).group(1))
    assert 250 <= stopped < 500, text
    assert waited < 60, text  # generous: the process's own exit, not the bound, dominates

    est = job.estimator(model_dir)
    assert est.latest_checkpoint().endswith(f"/{stopped}")
    job.dispatch_bound.DISPATCH_SECS, saved = job.DISPATCH_SECS, job.dispatch_bound.DISPATCH_SECS
    try:
        est.train(job.IndexedBatches, max_steps=stopped + 40)  # resumes at the saved input position
    finally:
        job.dispatch_bound.DISPATCH_SECS = saved
    hand = job.hand_params(stopped + 40)
    np.testing.assert_allclose(est.get_variable_value("w"), hand["w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(est.get_variable_value("b"), hand["b"], rtol=1e-4, atol=1e-5)
