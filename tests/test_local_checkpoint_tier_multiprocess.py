"""The local checkpoint tier with two processes x 4 devices: when one process's tier lacks
the newest local step, both resume from the newest step both hold; when one has none,
both resume from the model_dir. The final variables equal a one-process 8-device run."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.local_tier_worker import make_tpu_estimator, tpu_input_fn
from tests.two_processes import run_two_processes

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local_tier_worker.py")
MAX_STEPS = 20


class _Two:
    """Runs ``local_tier_worker.py two`` as two processes on one model_dir and local root."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.model_dir = str(tmp_path / "model")
        self.local = str(tmp_path / "local")

    def train(self, max_steps: int, tag: str) -> list[dict]:
        os.environ["LOCAL_TIER_DIR"], os.environ["LOCAL_TIER_MAX_STEPS"] = self.local, str(max_steps)
        try:
            return run_two_processes(WORKER, self.model_dir, self.tmp, tag=tag, timeout=150)
        finally:
            del os.environ["LOCAL_TIER_DIR"], os.environ["LOCAL_TIER_MAX_STEPS"]

    def local_step(self, process: int, step: int) -> str:
        return os.path.join(self.local, f"process_{process}", "checkpoints", str(step))

    def copy_to(self, tmp_path) -> _Two:
        """The same model_dir and local tier, copied under ``tmp_path``."""
        other = _Two(tmp_path)
        shutil.copytree(self.model_dir, other.model_dir)
        shutil.copytree(self.local, other.local)
        return other


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict[str, np.ndarray]:
    """MAX_STEPS steps on one process's 8 devices, the same global batches."""
    est = make_tpu_estimator(str(tmp_path_factory.mktemp("one_process")), None)
    est.train(tpu_input_fn, max_steps=MAX_STEPS)
    return est._checkpoint_store().read()


def _restored(results: list[dict]) -> list[str]:
    return [next(m for m in r["log"] if m.startswith("Restored state from")) for r in results]


def _assert_equal(results: list[dict], want: dict[str, np.ndarray]) -> None:
    for r in results:
        assert sorted(r["values"]) == sorted(want)
        for name, value in want.items():
            np.testing.assert_allclose(
                np.asarray(r["values"][name]), value, rtol=1e-5, atol=1e-5, err_msg=name
            )


@pytest.fixture(scope="module")
def trained_to_16(tmp_path_factory) -> _Two:
    """Both processes train to 16 (model_dir: 0, 10, 16; each local tier: 14, 16), then
    the model_dir's 16 goes, as a kill before the final save would have left it. Run once;
    each test works on its own copy (``copy_to``)."""
    two = _Two(tmp_path_factory.mktemp("trained_to_16"))
    two.train(16, "_first")
    for p in (0, 1):
        assert os.path.isdir(two.local_step(p, 14)) and os.path.isdir(two.local_step(p, 16))
    shutil.rmtree(os.path.join(two.model_dir, "checkpoints", "16"))
    return two


def test_both_resume_from_the_step_every_process_holds(tmp_path, one_process, trained_to_16):
    two = trained_to_16.copy_to(tmp_path)
    shutil.rmtree(two.local_step(1, 16))  # process 1's node lost its newest local save
    results = two.train(MAX_STEPS, "_resumed")
    assert _restored(results) == ["Restored state from checkpoint at global step 14."] * 2
    _assert_equal(results, one_process)


def test_a_process_without_local_checkpoints_makes_both_use_the_model_dir(
    tmp_path, one_process, trained_to_16
):
    two = trained_to_16.copy_to(tmp_path)
    shutil.rmtree(os.path.join(two.local, "process_1"))  # process 1 runs on a new node
    results = two.train(MAX_STEPS, "_resumed")
    assert _restored(results) == ["Restored state from checkpoint at global step 10."] * 2
    assert any("holds no checkpoint" in m and "process_1" in m for m in results[1]["log"])
    assert any("not every process holds it" in m for m in results[0]["log"])
    _assert_equal(results, one_process)
