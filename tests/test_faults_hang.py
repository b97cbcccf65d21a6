"""The hang watchdog (RunConfig.hang_timeout_secs, exit_on_hang): a stalled input_fn or
hook is reported once, by stage, with every thread's stack; exit_on_hang exits 124."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from jaxspec.loop import watchdog
from tests import hang_worker as job

SCRIPT = os.path.join(os.path.dirname(__file__), "hang_worker.py")


def _run(tmp_path, kind: str, exit_on_hang: bool, timeout: float) -> tuple[int | None, str, str]:
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, str(tmp_path / "run"), kind, "1" if exit_on_hang else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, out, err


def _report(err: str) -> list[tuple[float, str]]:
    return [
        (float(m.group(1)), m.group(2))
        for m in re.finditer(r"^(\d+\.\d+) ERROR:jaxspec:(No training step has ended.*)$", err, re.M)
    ]


def test_a_blocked_input_fn_is_named_its_stack_dumped_and_exit_on_hang_exits_124(tmp_path):
    status, out, err = _run(tmp_path, "input", exit_on_hang=True, timeout=120)
    assert status == watchdog.EXIT_STATUS, out + err[-4000:]
    reports = _report(err)
    assert len(reports) == 1, err[-4000:]
    when, line = reports[0]
    assert "the loop waits in input_fn" in line, line
    # step 6's batch was read; its loop may still be in flight while the next read blocks
    assert re.search(r"after global step [56]:", line), line
    assert "Exiting with status 124" in line
    stalled = float(re.search(r"stalled at (\d+\.\d+)", out).group(1))
    print(f"input_fn stall to report: {when - stalled:.2f} s (hang_timeout_secs {job.HANG_SECS})")
    assert job.HANG_SECS <= when - stalled < job.HANG_SECS + 10, (when, stalled)
    # every thread's stack: faulthandler's header, and the frame input_fn blocks in
    assert "Thread 0x" in err and "block_forever" in err.split(line)[1], err[-4000:]
    assert "finished" not in out


def test_a_sleeping_hook_is_named_once_and_training_goes_on(tmp_path):
    status, out, err = _run(tmp_path, "hook", exit_on_hang=False, timeout=120)
    assert status == 0, out + err[-4000:]
    reports = _report(err)
    assert len(reports) == 1, err[-4000:]  # once per hang, though it lasts two timeouts
    when, line = reports[0]
    assert "the loop waits in a hook (SleepOnce.after_run)" in line, line
    stalled = float(re.search(r"stalled at (\d+\.\d+)", out).group(1))
    print(f"hook stall to report: {when - stalled:.2f} s (hang_timeout_secs {job.HANG_SECS})")
    assert "Thread 0x" in err and "after_run" in err.split(line)[1]
    assert "finished" in out
