"""TF_CONFIG's evaluator task with jaxspec's train_and_evaluate (issue 32): the roles
TF_CONFIG gives, tf.estimator's errors, the evaluator's schedule on a fake clock while a
real Estimator writes checkpoints, and three processes (chief + worker training on 4
devices each under jax.distributed, an evaluator alone on 1 device) on 127.0.0.1."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import jaxspec
from jaxspec.config.cluster import Cluster, task_from_tf_config
from jaxspec.estimators import training
from jaxspec.estimators.exporter import eval_results_from_events
from jaxspec.store.checkpoints import CheckpointStore
from tests.helpers import digits, init_fn, make_model_fn
from tests.two_processes import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}


def _tf_config(kind: str, index: int = 0, **cluster: Any) -> str:
    return json.dumps({"cluster": {**CLUSTER, **cluster}, "task": {"type": kind, "index": index}})


def test_tf_config_roles() -> None:
    assert Cluster.from_tf_config(_tf_config("evaluator")) is None  # joins nothing
    listed = Cluster.from_tf_config(_tf_config("worker", 1, evaluator=["127.0.0.1:4"]))
    assert (listed.coordinator_address, listed.num_processes, listed.process_id) == ("127.0.0.1:1", 3, 2)
    assert task_from_tf_config(_tf_config("evaluator", 1)) == (
        "evaluator",
        1,
    )  # train_and_evaluate refuses it
    for bad, field in ((_tf_config("ps"), "'ps'"), (_tf_config("worker", -1), "index")):
        with pytest.raises(ValueError, match=field):
            task_from_tf_config(bad)
    with pytest.raises(ValueError, match="'evaluator'"):
        task_from_tf_config(_tf_config("chief", evaluator=["127.0.0.1:4", "127.0.0.1:5"]))
    assert task_from_tf_config("") is None
    assert task_from_tf_config('{"model_dir": "/tmp/m"}') is None  # no cluster: local, as TF
    with pytest.raises(ValueError, match="worker 0"):
        task_from_tf_config('{"task": {"type": "evaluator", "index": 0}}')


def test_run_config_on_the_evaluator_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", _tf_config("evaluator"))
    config = jaxspec.RunConfig()
    got = (config.task_type, config.task_id, config.is_chief, config.num_worker_replicas)
    assert got == ("evaluator", 0, False, 0) and config.global_id_in_cluster is None  # as tf.estimator
    given = jaxspec.RunConfig(cluster=Cluster("127.0.0.1:1", 1, 0))  # a cluster given has no TF_CONFIG role
    assert (given.task_type, given.is_chief, given.num_worker_replicas) == ("chief", True, 1)


def test_tf_estimator_errors_in_a_cluster(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = digits(8)
    input_fn = lambda: ({"x": x}, y)  # noqa: E731
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), str(tmp_path), init_fn=init_fn)
    train_spec, eval_spec = jaxspec.TrainSpec(input_fn, max_steps=2), jaxspec.EvalSpec(input_fn)
    monkeypatch.setenv("TF_CONFIG", _tf_config("evaluator", 1))
    with pytest.raises(ValueError, match="index 1"):
        jaxspec.train_and_evaluate(est, train_spec, eval_spec)
    monkeypatch.setenv("TF_CONFIG", _tf_config("evaluator"))
    with pytest.raises(ValueError, match="'evaluator' task"):
        est.train(input_fn, steps=1)
    with pytest.raises(ValueError, match="every_n_steps"):
        jaxspec.train_and_evaluate(est, train_spec, jaxspec.EvalSpec(input_fn, every_n_steps=1))
    with pytest.raises(ValueError, match="one EvalSpec"):
        jaxspec.train_and_evaluate(est, train_spec, [eval_spec, jaxspec.EvalSpec(input_fn, name="b")])
    assert not os.path.exists(os.path.join(tmp_path, "checkpoints", "0"))  # nothing was trained


class _Recorder(jaxspec.Exporter):
    """Records each export call; each evaluation "takes" ``eval_secs`` of the fake clock."""

    name = "recorder"

    def __init__(self, clock: list[float], eval_secs: float) -> None:
        self.clock, self.eval_secs, self.calls = clock, eval_secs, []

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        self.calls.append((int(eval_result["global_step"]), is_the_final_export, self.clock[0]))
        self.clock[0] += self.eval_secs


def _evaluator_on_a_fake_clock(
    model_dir: str, trainer: Any, input_fn: Any, throttle: float, delay: float, plan: dict
):
    """Run the evaluator task; the n-th sleep trains the trainer to ``plan[n]`` (time passes
    and the trainers write checkpoints meanwhile). Returns (sleeps, recorder, result)."""
    now, sleeps = [0.0], []

    def sleep(secs: float) -> None:
        sleeps.append(round(secs, 6))
        assert len(sleeps) < 20, f"the evaluator did not end: slept {sleeps}"
        now[0] += secs
        if len(sleeps) in plan:
            trainer.train(input_fn, max_steps=plan[len(sleeps)])

    recorder = _Recorder(now, eval_secs=4.0)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), model_dir, init_fn=init_fn)
    eval_spec = jaxspec.EvalSpec(
        input_fn, steps=1, start_delay_secs=delay, throttle_secs=throttle, exporters=recorder
    )
    result = training.run_cluster_task(
        est,
        jaxspec.TrainSpec(input_fn, max_steps=max(plan.values())),
        eval_spec,
        ("evaluator", 0),
        training._jaxspec_family(),
        sleep=sleep,
        clock=lambda: now[0],
    )
    return sleeps, recorder, result


def test_evaluator_schedule_on_a_fake_clock(tmp_path: Any) -> None:
    x, y = digits(16)
    input_fn = lambda: ({"x": x}, y)  # noqa: E731
    config = jaxspec.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=2, log_step_count_steps=None)
    trainer = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    # start_delay 30 s, during which steps 0 and 2 are saved: step 2, the newest, is
    # evaluated at t=30 (4 s); the next look is throttle_secs after that one started
    # (t=40): nothing new; during the following 10 s step 4 = max_steps is saved.
    sleeps, recorder, (metrics, exports) = _evaluator_on_a_fake_clock(
        str(tmp_path), trainer, input_fn, throttle=10, delay=30, plan={1: 2, 3: 4}
    )
    assert sleeps == [30, 6, 10]
    assert recorder.calls == [(2, False, 30.0), (4, True, 50.0)]
    assert metrics["global_step"] == 4 and exports == [None]
    evaluated = [r["global_step"] for r in eval_results_from_events(os.path.join(tmp_path, "eval", "*"))]
    assert evaluated == [2, 4]  # 0 never: it was not the newest when the evaluator looked


# -- three processes ------------------------------------------------------------------


def _run_cluster(model_dir: str, out_dir: str, timeout: float = 300) -> dict[str, dict]:
    """The chief, the worker and the evaluator of one TF_CONFIG as processes running
    ``tests/evaluator_task_worker.py``; when one fails the others are stopped."""
    port = free_port()
    cluster = {"chief": [f"127.0.0.1:{port}"], "worker": [f"127.0.0.1:{free_port()}"]}
    procs = {}
    for kind in ("chief", "worker", "evaluator"):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
        env.pop("XLA_FLAGS", None)  # the script sets each task's device count
        log = open(os.path.join(out_dir, f"{kind}.log"), "w")
        cmd = [sys.executable, os.path.join(ROOT, "tests", "evaluator_task_worker.py"), model_dir]
        procs[kind] = subprocess.Popen(
            [*cmd, os.path.join(out_dir, f"{kind}.json")], env=env, stdout=log, stderr=log
        )
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs.values()):
                break
            time.sleep(0.2)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    for kind, p in procs.items():
        with open(os.path.join(out_dir, f"{kind}.log")) as f:
            assert p.returncode == 0, f"{kind} failed:\n{f.read()[-4000:]}"
    results = {}
    for kind in procs:
        with open(os.path.join(out_dir, f"{kind}.json")) as f:
            results[kind] = json.load(f)
    return results


def _numpy_eval(values: dict[str, np.ndarray]) -> dict[str, float]:
    """The test MLP's eval metrics by hand: 37 rows in batches of 16, 16, 5; the loss is
    the mean of the batches' mean cross-entropies (tf.estimator's)."""
    x, y = digits(37)
    p = {k.removeprefix("params/params/"): v.astype(np.float64) for k, v in values.items()}
    hidden = np.tanh(x @ p["Dense_1/kernel"] + p["Dense_1/bias"])  # flax names Dense(10) first
    logits = hidden @ p["Dense_0/kernel"] + p["Dense_0/bias"]
    shifted = logits - logits.max(-1, keepdims=True)
    ce = np.log(np.exp(shifted).sum(-1)) - shifted[np.arange(37), y]
    loss = np.mean([ce[s : s + 16].mean() for s in (0, 16, 32)])
    return {"loss": loss, "accuracy": np.mean(logits.argmax(-1) == y), "mean_label": y.mean()}


def test_chief_worker_and_evaluator_processes(tmp_path: Any) -> None:
    model_dir = str(tmp_path / "model")
    results = _run_cluster(model_dir, str(tmp_path))
    for kind in ("chief", "worker"):  # they train together and return nothing, as TF
        assert results[kind]["task_type"] == kind and results[kind]["result"] is None
        assert (results[kind]["processes"], results[kind]["devices"]) == (2, 8)
    evaluator = results["evaluator"]
    assert (evaluator["task_type"], evaluator["processes"], evaluator["devices"]) == ("evaluator", 1, 1)

    with open(tmp_path / "evaluated.jsonl") as f:
        calls = [json.loads(line) for line in f]
    store = CheckpointStore(model_dir)
    assert store.all_steps() == [0, 3, 6]
    assert [(c["step"], c["final"]) for c in calls] == [(0, False), (3, False), (6, True)]  # each once
    best_so_far, best_steps = np.inf, []
    for call in calls:
        assert call["checkpoint_path"] == store.path(call["step"])
        want = _numpy_eval(store.read(call["step"]))
        for name, value in want.items():
            np.testing.assert_allclose(
                call["metrics"][name], value, rtol=2e-5, err_msg=f"{name} at {call['step']}"
            )
        if want["loss"] < best_so_far:
            best_so_far, best_steps = want["loss"], [*best_steps, call["step"]]
    # The evaluator ended after the final checkpoint, returning that evaluation.
    assert evaluator["result"]["metrics"] == calls[-1]["metrics"]
    events = eval_results_from_events(os.path.join(model_dir, "eval", "*.tfevents.*"))
    assert [(e["global_step"], e["loss"]) for e in events] == [
        (c["step"], pytest.approx(c["metrics"]["loss"])) for c in calls
    ]
    # BestExporter exported exactly the evaluations that beat the earlier ones.
    exports = sorted(glob.glob(os.path.join(model_dir, "export", "best_exporter", "*", "saved_model.pb")))
    assert len(exports) == len(best_steps) >= 1
    final_export = evaluator["result"]["exports"][0]
    assert (final_export is not None) == (best_steps[-1] == 6)
    if final_export is not None:
        assert os.path.dirname(exports[-1]) == final_export
