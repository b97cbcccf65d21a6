"""kill -9 mid-training loses no completed checkpoint; SIGTERM saves, then exits with 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.train_subprocess import input_fn, make_estimator

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_subprocess.py")


def _start(model_dir: str, max_steps: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SCRIPT, model_dir, str(max_steps), "0.05", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_steps(proc: subprocess.Popen, n: int) -> None:
    done = 0
    deadline = time.time() + 120
    while done < n and time.time() < deadline:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, "the training process ended early"
        done += line.startswith("step done")
    assert done >= n


def _params(est) -> dict[str, np.ndarray]:
    return est._checkpoint_store().read()


STRAIGHT_STEPS = 30


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """One uninterrupted run of STRAIGHT_STEPS steps, a checkpoint kept at every step: the
    reference of every test here (a step's state does not depend on max_steps)."""
    est = make_estimator(str(tmp_path_factory.mktemp("straight")))
    est.train(input_fn, max_steps=STRAIGHT_STEPS)
    return est


def _uninterrupted(straight, tmp_path, steps: int) -> dict[str, np.ndarray]:
    """The state after ``steps`` uninterrupted steps: the shared run's checkpoint, or a
    run of its own past STRAIGHT_STEPS."""
    if steps <= STRAIGHT_STEPS:
        return straight._checkpoint_store().read(steps)
    est = make_estimator(str(tmp_path / "straight"))
    est.train(input_fn, max_steps=steps)
    return _params(est)


def test_kill_9_then_resume(tmp_path, straight):
    model_dir = str(tmp_path / "killed")
    proc = _start(model_dir, 30)
    _wait_for_steps(proc, 8)
    proc.kill()
    proc.wait(timeout=30)
    ckpt_dir = os.path.join(model_dir, "checkpoints")
    completed = sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())
    assert completed and completed == list(range(completed[0], completed[-1] + 1))
    est = make_estimator(model_dir)
    assert est._checkpoint_store().latest_step() == completed[-1]
    for step in completed:  # every checkpoint the kill left behind is complete and readable
        assert int(est._checkpoint_store().read(step)["step"]) == step
    est.train(input_fn, max_steps=30)
    resumed, want = _params(est), _uninterrupted(straight, tmp_path, 30)
    assert sorted(resumed) == sorted(want)
    for name in want:
        np.testing.assert_allclose(resumed[name], want[name], atol=1e-6, err_msg=name)


@pytest.mark.parametrize("how", ["train", "train_and_evaluate"])
def test_sigterm_saves_then_exits_with_the_sigterm_status(tmp_path, straight, how):
    """A scheduler must not read a preempted run as a finished one: the status is 143,
    that of a process ended by SIGTERM, after the checkpoint is saved."""
    model_dir = str(tmp_path / "preempted")
    proc = _start(model_dir, 1000, *([how] if how != "train" else []))
    _wait_for_steps(proc, 5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "finished" not in out
    est = make_estimator(model_dir)
    stopped_at = est._checkpoint_store().latest_step()
    assert 5 <= stopped_at < 1000
    steps_run = 5 + out.count("step done")
    assert stopped_at == steps_run  # the step it stopped at is saved
    est.train(input_fn, max_steps=stopped_at + 3)
    resumed, want = _params(est), _uninterrupted(straight, tmp_path, stopped_at + 3)
    assert sorted(resumed) == sorted(want)
    for name in want:
        np.testing.assert_allclose(resumed[name], want[name], atol=1e-6, err_msg=name)


def test_a_sigterm_handler_of_the_program_takes_the_signal(tmp_path):
    """The program's own SIGTERM handler is called after the save, instead of an exit."""
    import jaxspec

    class TermAt2(jaxspec.SessionRunHook):
        def after_run(self, run_context, run_values):
            if run_values.results == 1:  # global step before the second step: 1
                os.kill(os.getpid(), signal.SIGTERM)

        def before_run(self, run_context):
            return jaxspec.SessionRunArgs("global_step")

    called = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    try:
        est = make_estimator(str(tmp_path))
        est.train(input_fn, max_steps=50, hooks=[TermAt2()])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert called == [signal.SIGTERM]
    assert est._checkpoint_store().latest_step() < 50
