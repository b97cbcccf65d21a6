"""RunConfig(preemption_signals=...): a listed signal (Slurm's SIGUSR1) preempts as SIGTERM
does (checkpoint at the next step that can be reached, exit 143, resume equals an
uninterrupted run); a signal not listed keeps its default action."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import preemption_subprocess as job

SCRIPT = os.path.join(os.path.dirname(__file__), "preemption_subprocess.py")


def _start_until(args: list[str], marker: str) -> tuple[subprocess.Popen, list[str]]:
    """Start ``python args`` on the CPU; return it with its output up to the first line
    that starts with ``marker`` (included)."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(marker):
            break
    return proc, lines


def _start_and_signal(model_dir: str, signum: int, *signals: str) -> tuple[subprocess.Popen, str, float]:
    """Train to 3000 steps listing ``signals``; send ``signum`` once step 250 is reported.
    Returns the process (ended), its output and the seconds from the signal to its exit."""
    args = [SCRIPT, model_dir, "3000", *([",".join(signals)] if signals else [])]
    proc, lines = _start_until(args, "at step 250")
    time.sleep(0.1)
    proc.send_signal(signum)
    signalled = time.perf_counter()
    out, _ = proc.communicate(timeout=120)
    return proc, "".join(lines) + out, time.perf_counter() - signalled


def test_sigusr1_listed_saves_exits_143_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path):
    model_dir = str(tmp_path / "run")
    proc, text, waited = _start_and_signal(model_dir, signal.SIGUSR1, "SIGUSR1", "SIGTERM")
    print(f"SIGUSR1 to exit: {waited:.2f} s")
    assert proc.returncode == 143, text
    assert "SIGUSR1 received: stopping at the next step" in text
    stopped = int(re.search(r"Training stopped by SIGUSR1 at global step (\d+)", text).group(1))
    after = int(re.search(r"Steps run after the signal: (\d+)", text).group(1))
    assert 250 <= stopped < 500 and after <= 2 * job.MAX_CAP, text
    assert "finished" not in text
    assert waited < 60, text  # generous: the interpreter's own exit dominates

    est = job.estimator(model_dir)
    assert est.latest_checkpoint().endswith(f"/{stopped}")
    saved, job.dispatch_bound.DISPATCH_SECS = job.dispatch_bound.DISPATCH_SECS, job.DISPATCH_SECS
    try:
        est.train(job.IndexedBatches, max_steps=stopped + 40)  # resumes at the saved input position
    finally:
        job.dispatch_bound.DISPATCH_SECS = saved
    hand = job.hand_params(stopped + 40)
    np.testing.assert_allclose(est.get_variable_value("w"), hand["w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(est.get_variable_value("b"), hand["b"], rtol=1e-4, atol=1e-5)


def test_a_signal_not_listed_keeps_its_default_action(tmp_path):
    """SIGUSR1's default ends the process at once (status -SIGUSR1): no checkpoint is
    written for it, no preemption line is logged."""
    model_dir = str(tmp_path / "run")
    proc, text, _ = _start_and_signal(model_dir, signal.SIGUSR1)  # only SIGTERM listed (the default)
    assert proc.returncode == -signal.SIGUSR1, text
    assert "received: stopping" not in text and "Training stopped by" not in text
    # saves every 1000 steps: only the step-0 checkpoint (tf.estimator's, at the start) exists
    assert job.estimator(model_dir).latest_checkpoint().endswith("/0")


STALLED = """
import sys, time
sys.path.insert(0, {root!r})
from tests import preemption_subprocess as job

def stalled_input():
    for i in range(40):
        x, y = job.batch(i)
        yield {{"x": x}}, y
    print("stalled", flush=True)
    while True:
        time.sleep(0.05)

job.estimator({model_dir!r}).train(stalled_input, max_steps=1000)
print("finished", flush=True)
"""


def test_second_sigterm_while_input_fn_stalls_ends_the_process_at_once(tmp_path):
    """The first SIGTERM waits for a step it can stop at, which an input_fn that blocks
    never gives; the second ends the process as SIGTERM would have, writing nothing."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = STALLED.format(root=root, model_dir=str(tmp_path / "run"))
    proc, lines = _start_until(["-c", code], "stalled")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    assert proc.poll() is None, "".join(lines)  # the first signal only asks for a stop
    proc.send_signal(signal.SIGTERM)
    signalled = time.perf_counter()
    out, _ = proc.communicate(timeout=60)
    text = "".join(lines) + out
    assert proc.returncode == -signal.SIGTERM, text  # ended by the signal itself
    assert "SIGTERM received: stopping at the next step" in text
    assert "SIGTERM received again before training reached a step it can stop at" in text
    assert "finished" not in text and "Training stopped by" not in text
    assert time.perf_counter() - signalled < 30, text


def test_second_signal_during_the_final_save_is_ignored_and_one_to_a_handler_is_handed_on(caplog):
    """Once the loop has stopped (reached_last_boundary), a further listed signal must not
    cut the stop's checkpoint short; before that, with a handler of the program's own, the
    second signal goes to it (and the log does not claim the process ends)."""
    from jaxspec.loop.preemption import PreemptionWatcher

    caplog.set_level("INFO", logger="jaxspec")
    with PreemptionWatcher(lambda: 7, (signal.SIGUSR1,)) as watcher:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert watcher.triggered and watcher.step_at_signal == 7
        watcher.reached_last_boundary()
        os.kill(os.getpid(), signal.SIGUSR1)  # would end the process without the flag
    assert "SIGUSR1 received again while the stop's checkpoint is being written: ignored." in caplog.text
    with pytest.raises(SystemExit):  # as the loop ends; it gives the handlers back
        watcher.exit_if_triggered(7)

    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with PreemptionWatcher(None, (signal.SIGUSR1,)):
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
        assert "handing it to the program's own handler" in caplog.text
    finally:
        signal.signal(signal.SIGUSR1, previous)
