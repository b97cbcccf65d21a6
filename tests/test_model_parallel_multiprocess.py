"""Two processes of 4 CPU devices with num_cores_per_replica=2 (one 4x2 mesh over both)
equal one process of 8 devices at 4x2; the sharded checkpoint they write resumes in one,
and one process's checkpoint resumes in two."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import jaxspec
from tests import model_parallel_worker as worker
from tests import multiprocess_worker as inputs
from tests.two_processes import run_two_processes

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_parallel_worker.py")


def _run_two_processes(model_dir: str, tmp_path, tag: str = "") -> list[dict]:
    return run_two_processes(SCRIPT, model_dir, tmp_path, tag)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mp_model_parallel")
    two = _run_two_processes(str(tmp / "two"), tmp)
    host_losses: list = []
    one = worker.make_estimator(str(tmp / "one"), host_losses)
    one.train(inputs.train_input_fn, steps=inputs.STEPS)
    return tmp, two, one, host_losses


def test_two_processes_at_4x2_equal_one_process_at_4x2(runs):
    _, (chief, other), one, host_losses = runs
    assert chief["mesh"] == other["mesh"] == {"replica": 4, "core": 2}
    assert chief["kernel_spec"] == ["None", "core"]
    # Each process holds its 4 devices' halves of the [64, 32] kernel, never all of it.
    assert chief["kernel_local_shards"] == other["kernel_local_shards"] == [[64, 16]] * 4
    ref = one._checkpoint_store().read()
    assert set(chief["params"]) == set(ref)
    for name, value in ref.items():
        np.testing.assert_allclose(chief["params"][name], value, atol=1e-5, rtol=0, err_msg=name)
    assert other["host_call_losses"] == []  # process 0 calls host functions
    np.testing.assert_allclose(chief["host_call_losses"], np.stack(host_losses), atol=1e-5, rtol=0)
    ref_metrics = one.evaluate(inputs.eval_input_fn)
    for key, value in ref_metrics.items():
        assert chief["metrics"][key] == pytest.approx(float(value), abs=1e-5), key
        assert other["metrics"][key] == pytest.approx(float(value), abs=1e-5), key
    ref_logits = np.array([p["logits"] for p in one.predict(inputs.predict_input_fn)])
    rows = chief["rows"] + other["rows"]
    assert sorted(rows) == list(range(inputs.N_EVAL))  # each example predicted once
    np.testing.assert_allclose(
        np.array(chief["logits"] + other["logits"]), ref_logits[rows], atol=1e-5, rtol=0
    )


def test_their_checkpoint_resumes_in_one_process(runs):
    tmp, _, one, _ = runs
    resumed = worker.make_estimator(str(tmp / "two"), [])
    resumed.train(inputs.train_input_fn, steps=2)
    one.train(inputs.train_input_fn, steps=2)
    a, b = resumed._checkpoint_store().read(), one._checkpoint_store().read()
    assert int(a["step"]) == inputs.STEPS + 2
    for name in b:
        np.testing.assert_allclose(a[name], b[name], atol=1e-5, rtol=0, err_msg=name)


def test_one_process_checkpoint_resumes_in_two(tmp_path):
    """8x1 in this process writes step 3; two processes (4x2 over both) restore it, each
    reading its own shards, and train on: the same numbers as 4x2 here."""
    from tests.helpers import fast_config, make_model_fn
    from tests.model_parallel_models import Mlp, make_init_fn

    seed = str(tmp_path / "seed")
    first = jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(seed),
        train_batch_size=inputs.TRAIN_BATCH,
        init_fn=make_init_fn(Mlp()),
    )
    first.train(inputs.train_input_fn, steps=3)
    shutil.copytree(seed, tmp_path / "two")
    shutil.copytree(seed, tmp_path / "one")
    chief, _ = _run_two_processes(str(tmp_path / "two"), tmp_path, "-resumed")
    here = worker.make_estimator(str(tmp_path / "one"), [])
    here.train(inputs.train_input_fn, steps=inputs.STEPS)
    ref = here._checkpoint_store().read()
    assert int(ref["step"]) == 3 + inputs.STEPS
    for name, value in ref.items():
        np.testing.assert_allclose(chief["params"][name], value, atol=1e-5, rtol=0, err_msg=name)
