"""Two processes of 4 CPU devices (gloo on 127.0.0.1) equal one process of 8 devices."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests import multiprocess_worker as worker
from tests.two_processes import run_two_processes

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multiprocess_worker.py")


def _run_two_processes(model_dir: str, tmp_path) -> list[dict]:
    return run_two_processes(SCRIPT, model_dir, tmp_path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multiprocess")
    two = _run_two_processes(str(tmp / "two"), tmp)
    host_calls: list = []
    one = worker.make_estimator(str(tmp / "one"), host_calls)
    one.train(worker.train_input_fn, steps=worker.STEPS)
    return tmp, two, one, host_calls


def test_two_processes_equal_one(runs):
    tmp, (chief, other), one, host_calls = runs
    assert (chief["processes"], chief["devices"], other["process"]) == (2, 8, 1)
    ref_params = one._checkpoint_store().read()
    for name, value in chief["params"].items():
        np.testing.assert_allclose(value, ref_params[name], atol=1e-5, err_msg=name)
    # host_call ran on process 0 only, once per step, with all 8 replicas' losses
    assert other["host_call_losses"] == [] and chief["host_call_steps"] == list(range(worker.STEPS))
    np.testing.assert_allclose(chief["host_call_losses"], [loss for _, loss in host_calls], atol=1e-5)
    ref_metrics = one.evaluate(worker.eval_input_fn)
    for key in ("accuracy", "mean_label", "loss"):
        assert chief["metrics"][key] == pytest.approx(ref_metrics[key], abs=1e-5)
        assert other["metrics"][key] == pytest.approx(ref_metrics[key], abs=1e-5)


def test_predict_yields_each_example_once_across_processes(runs):
    tmp, (chief, other), one, _ = runs
    rows = chief["rows"] + other["rows"]
    assert sorted(rows) == list(range(worker.N_EVAL))
    ref = np.array([p["logits"] for p in one.predict(worker.predict_input_fn)])
    got = np.array(chief["logits"] + other["logits"])
    assert len(got) == worker.N_EVAL
    np.testing.assert_allclose(got, ref[rows], atol=1e-5)


def test_checkpoint_from_two_processes_resumes_in_one(runs):
    tmp, (chief, _), one, _ = runs
    resumed = worker.make_estimator(str(tmp / "two"), [])
    assert resumed.get_variable_value("step") == worker.STEPS
    np.testing.assert_allclose(
        resumed.get_variable_value("params/params/Dense_0/kernel"),
        chief["params"]["params/params/Dense_0/kernel"],
        atol=0,
    )
    resumed.train(worker.train_input_fn, steps=2)  # one process, 8 devices, continues
    one.train(worker.train_input_fn, steps=2)
    a, b = resumed._checkpoint_store().read(), one._checkpoint_store().read()
    assert int(a["step"]) == worker.STEPS + 2
    for name in b:
        np.testing.assert_allclose(a[name], b[name], atol=1e-5, err_msg=name)


def test_export_is_written_once_by_process_0(runs):
    tmp, (chief, other), one, _ = runs
    tf = pytest.importorskip("tensorflow")
    assert other["export"] is None and chief["export"] is not None
    assert os.listdir(os.path.dirname(chief["export"])) == [os.path.basename(chief["export"])]
    x, _ = worker.digits(worker.N_EVAL)
    served = tf.saved_model.load(chief["export"]).signatures["serving_default"](x=tf.constant(x))
    # the chief's own predictions (same checkpoint) for its rows, served by TensorFlow
    np.testing.assert_allclose(served["logits"].numpy()[chief["rows"]], np.array(chief["logits"]), atol=1e-5)
