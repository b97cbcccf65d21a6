"""The input's position survives SIGKILL: three kills at random moments, then a resume,
equal an uninterrupted run, for tf.data and for a get_state()/set_state() iterator."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.position_subprocess import BATCH, ROWS, input_fn_for, make_estimator

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "position_subprocess.py")
MAX_STEPS = 24


def _run_until_killed(model_dir: str, kind: str, steps: int, extra_secs: float) -> None:
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, model_dir, str(MAX_STEPS), "0.05", kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done, deadline = 0, time.time() + 180
    while done < steps and time.time() < deadline:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, "the training process ended early"
        done += line.startswith("step done")
    assert done == steps
    time.sleep(extra_secs)  # somewhere inside a later step or save
    proc.kill()
    proc.wait(timeout=30)


def _final(est) -> dict[str, np.ndarray]:
    return est._checkpoint_store().read()


def _first_batches(kind: str, n: int) -> list[np.ndarray]:
    result = input_fn_for(kind)()
    it = result.as_numpy_iterator() if hasattr(result, "as_numpy_iterator") else iter(result)
    return [next(it)[1] for _ in range(n)]


@pytest.mark.parametrize("kind", ["tfdata", "stateful"])
def test_three_kills_then_resume_equals_uninterrupted(tmp_path, kind, caplog):
    labels = _first_batches(kind, MAX_STEPS)
    assert ROWS // BATCH < MAX_STEPS  # more than one epoch: the order changes per epoch too
    assert len({batch.tobytes() for batch in labels}) == MAX_STEPS  # every step reads other rows
    rng = random.Random(f"kills-{kind}")
    model_dir = str(tmp_path / "killed")
    reached = []
    for _ in range(3):
        _run_until_killed(model_dir, kind, rng.randint(2, 5), rng.uniform(0.0, 0.08))
        reached.append(make_estimator(model_dir)._checkpoint_store().latest_step())
    assert reached == sorted(reached) and reached[-1] < MAX_STEPS
    resumed = make_estimator(model_dir)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        resumed.train(input_fn_for(kind), max_steps=MAX_STEPS)
    assert any("Input position restored" in r.getMessage() for r in caplog.records)
    straight = make_estimator(str(tmp_path / "straight"))
    straight.train(input_fn_for(kind), max_steps=MAX_STEPS)
    a, b = _final(resumed), _final(straight)
    assert int(a["step"]) == int(b["step"]) == MAX_STEPS
    for name in b:
        np.testing.assert_allclose(a[name], b[name], atol=1e-6, err_msg=name)


def test_plain_generator_restarts_and_says_so_once(tmp_path, caplog):
    """A generator has no position: resuming starts it again (tf.estimator's behaviour),
    so the result differs from an uninterrupted run, and the log says so once."""
    model_dir = str(tmp_path / "gen")
    make_estimator(model_dir).train(input_fn_for("generator"), max_steps=4)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est = make_estimator(model_dir)
        est.train(input_fn_for("generator"), max_steps=6)
        est.train(input_fn_for("generator"), max_steps=8)
    told = [r for r in caplog.records if "starts again from the first batch" in r.getMessage()]
    assert len(told) == 1 and "global step 4" in told[0].getMessage()
    straight = make_estimator(str(tmp_path / "straight"))
    straight.train(input_fn_for("generator"), max_steps=8)
    a, b = _final(est), _final(straight)
    assert not np.allclose(a["params/params/Dense_0/kernel"], b["params/params/Dense_0/kernel"], atol=1e-6)
    with caplog.at_level(logging.INFO, logger="jaxspec"):  # the stateful iterator resumes exactly
        stateful = make_estimator(str(tmp_path / "stateful"))
        stateful.train(input_fn_for("stateful"), max_steps=4)
        stateful.train(input_fn_for("stateful"), max_steps=8)
    c = _final(stateful)
    np.testing.assert_allclose(
        c["params/params/Dense_0/kernel"], b["params/params/Dense_0/kernel"], atol=1e-6
    )
