"""The node-local checkpoint tier (RunConfig's local_checkpoint_dir): a SIGKILL after a
local save resumes from it, input position included, and equals an uninterrupted run;
an empty local tier resumes from the model_dir with a log line naming it; a damaged
local checkpoint falls back to the one before."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.local_tier_worker import input_fn, make_estimator

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local_tier_worker.py")
MAX_STEPS = 20


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, np.ndarray]:
    """The final variables of MAX_STEPS steps in one run, without a local tier."""
    est = make_estimator(str(tmp_path_factory.mktemp("uninterrupted")), None)
    est.train(input_fn, max_steps=MAX_STEPS)
    return est._checkpoint_store().read()


def _committed(checkpoints: str) -> list[int]:
    # Orbax writes commit_success.txt inside "<step>.orbax-checkpoint-tmp" and then renames the
    # directory; only the renamed, all-digit directories are committed steps.
    names = (
        os.path.basename(os.path.dirname(p))
        for p in glob.glob(os.path.join(checkpoints, "*", "commit_success.txt"))
    )
    return sorted(int(name) for name in names if name.isdigit())


def _assert_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def _restored_step(caplog) -> int:
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Restored state from")]
    assert len(lines) == 1, lines
    return int(lines[0].rstrip(".").rsplit(" ", 1)[-1])


def test_sigkill_after_local_save_resumes_from_it(tmp_path, uninterrupted, caplog):
    model_dir, local_dir = str(tmp_path / "model"), str(tmp_path / "local")
    local_ckpts = os.path.join(local_dir, "process_0", "checkpoints")
    proc = subprocess.Popen(
        [sys.executable, WORKER, "one", model_dir, local_dir, str(MAX_STEPS), "0.3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    try:
        while not [s for s in _committed(local_ckpts) if 12 <= s < 20] and time.time() < deadline:
            assert proc.poll() is None, "the training process ended early"
            time.sleep(0.02)
    finally:
        proc.kill()  # SIGKILL: no grace period, no final checkpoint
        proc.wait(timeout=30)
    local_steps = _committed(local_ckpts)
    model_steps = _committed(os.path.join(model_dir, "checkpoints"))
    assert max(model_steps) == 10, model_steps  # the kill came before the model_dir's step 20
    newest_local = max(s for s in local_steps if s < MAX_STEPS)
    assert newest_local > 10

    caplog.set_level(logging.INFO, logger="jaxspec")
    est = make_estimator(model_dir, local_dir)
    est.train(input_fn, max_steps=MAX_STEPS)
    assert _restored_step(caplog) == newest_local  # the local step, not the model_dir's 10
    tier = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Resuming from the local")]
    assert tier == [
        f"Resuming from the local checkpoint tier {local_ckpts} at global step {newest_local} "
        "(the model_dir's newest is global step 10)."
    ], tier
    assert any(
        r.getMessage() == f"Input position restored from the checkpoint at global step {newest_local}."
        for r in caplog.records
    )
    _assert_equal(est._checkpoint_store().read(), uninterrupted)
    assert est.latest_checkpoint().endswith(os.path.join("checkpoints", str(MAX_STEPS)))


def _train_then_lose_final(tmp_path) -> tuple[str, str]:
    """Train to 16 (model_dir: 0, 10, 16; local tier: 14, 16), then remove the model_dir's
    final checkpoint, as a kill before it would have: (model_dir, local_dir)."""
    model_dir, local_dir = str(tmp_path / "model"), str(tmp_path / "local")
    make_estimator(model_dir, local_dir).train(input_fn, max_steps=16)
    shutil.rmtree(os.path.join(model_dir, "checkpoints", "16"))
    assert _committed(os.path.join(local_dir, "process_0", "checkpoints")) == [14, 16]
    return model_dir, local_dir


def test_empty_local_tier_resumes_from_model_dir_with_a_log_line(tmp_path, uninterrupted, caplog):
    model_dir, _ = _train_then_lose_final(tmp_path)
    new_node = str(tmp_path / "new_node_local")  # missing: a new node
    caplog.set_level(logging.INFO, logger="jaxspec")
    est = make_estimator(model_dir, new_node)
    est.train(input_fn, max_steps=MAX_STEPS)
    assert _restored_step(caplog) == 10
    named = [r.getMessage() for r in caplog.records if "holds no checkpoint" in r.getMessage()]
    assert len(named) == 1 and os.path.join(new_node, "process_0", "checkpoints") in named[0], named
    _assert_equal(est._checkpoint_store().read(), uninterrupted)


def test_damaged_local_checkpoint_falls_back_to_the_one_before(tmp_path, uninterrupted, caplog):
    model_dir, local_dir = _train_then_lose_final(tmp_path)
    newest = os.path.join(local_dir, "process_0", "checkpoints", "16")
    arrays = [
        p for p in glob.glob(os.path.join(newest, "default", "**", "*"), recursive=True) if os.path.isfile(p)
    ]
    victim = max(arrays, key=os.path.getsize)
    with open(victim, "r+b") as f:  # one flipped byte in the largest file of the arrays
        f.seek(os.path.getsize(victim) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    caplog.set_level(logging.INFO, logger="jaxspec")
    est = make_estimator(model_dir, local_dir)
    est.train(input_fn, max_steps=MAX_STEPS)
    assert _restored_step(caplog) == 14
    assert any("global step 16" in r.getMessage() and "corrupted" in r.getMessage() for r in caplog.records)
    _assert_equal(est._checkpoint_store().read(), uninterrupted)
