"""tf_bridge in a TF_CONFIG cluster, as tf.estimator ran there: is_chief and chief-only
hooks, train refused on evaluator/ps tasks, and a real between-graph run (a parameter
server, a chief, a worker and an evaluator as processes on 127.0.0.1) whose model
trains, whose checkpoints a single-process Estimator reads, and whose evaluator
evaluates the last checkpoint as that Estimator does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
from tools import tf215_reference_models as models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = os.path.join(ROOT, "tests", "tf_cluster_task.py")


def _set_tf_config(monkeypatch: pytest.MonkeyPatch, **tf_config: Any) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_train_is_refused_on_evaluator_and_ps_tasks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    for task in ("evaluator", "ps"):
        _set_tf_config(monkeypatch, cluster=cluster, task={"type": task, "index": 0})
        est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
        with pytest.raises(ValueError, match=task):
            est.train(models.train_input_fn, steps=1)
    _set_tf_config(monkeypatch, cluster=cluster, task={"type": "evaluator", "index": 1})
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
    with pytest.raises(ValueError, match="evaluator"):
        tf_bridge.train_and_evaluate(
            est, tf_bridge.TrainSpec(models.train_input_fn), tf_bridge.EvalSpec(models.eval_input_fn)
        )


def test_model_dir_from_tf_config(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _set_tf_config(monkeypatch, model_dir=str(tmp_path / "from_env"))
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []))
    assert est.model_dir == str(tmp_path / "from_env")
    with pytest.raises(ValueError, match="model_dir"):
        tf_bridge.RunConfig(model_dir=str(tmp_path / "other"))


def test_a_worker_runs_no_chief_only_hooks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chief and worker share one in-process server (TF_CONFIG's session_master): the
    chief initialises and checkpoints; the worker trains on the same variables, runs its
    training hooks but not the chief-only ones, and writes no checkpoint."""
    server = tf.distribute.Server.create_local_server()
    calls = {"chief_only": 0, "all": 0}

    class Count(tf.compat.v1.train.SessionRunHook):
        def __init__(self, key: str) -> None:
            self.key = key

        def after_run(self, run_context, run_values):
            calls[self.key] += 1

    def model_fn(features, labels, mode):
        spec = models.make_linear_model_fn(tf_bridge, [])(features, labels, mode, {})
        return spec._replace(
            training_chief_hooks=[Count("chief_only")],
            training_hooks=list(spec.training_hooks) + [Count("all")],
        )

    def estimator(task: str) -> tf_bridge.Estimator:
        _set_tf_config(
            monkeypatch,
            cluster={"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
            task={"type": task, "index": 0},
            session_master=server.target,
        )
        config = tf_bridge.RunConfig(
            session_config=tf.compat.v1.ConfigProto(), save_checkpoints_steps=2, log_step_count_steps=None
        )
        assert config.is_chief == (task == "chief")
        return tf_bridge.Estimator(model_fn, str(tmp_path), config=config)

    estimator("chief").train(models.train_input_fn, steps=2)
    assert calls == {"chief_only": 2, "all": 2}
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path))) == "model.ckpt-2"
    estimator("worker").train(models.train_input_fn, max_steps=5)
    assert calls == {"chief_only": 2, "all": 5}  # the worker continued from the chief's step 2
    assert os.path.basename(tf.train.latest_checkpoint(str(tmp_path))) == "model.ckpt-2"


def _initial_eval_loss() -> float:
    x, y = models.eval_data()
    pred = x @ np.array(models.W0, np.float32) + np.array(models.B0, np.float32)
    return float(np.mean((pred - y) ** 2))


def test_between_graph_training_with_ps_chief_worker_and_evaluator(tmp_path: Any) -> None:
    ps, chief, worker = (f"127.0.0.1:{p}" for p in _free_ports(3))
    cluster = {"ps": [ps], "chief": [chief], "worker": [worker]}
    model_dir, max_steps = str(tmp_path / "model"), 200
    procs = {}
    for task in ("ps", "chief", "worker", "evaluator"):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task, "index": 0}}))
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        out = str(tmp_path / f"{task}.json")
        procs[task] = (
            subprocess.Popen(
                [sys.executable, TASK, model_dir, str(max_steps), out],
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / f"{task}.log", "w"),
            ),
            out,
        )
    try:
        for task in ("chief", "worker", "evaluator"):
            assert procs[task][0].wait(timeout=240) == 0, (tmp_path / f"{task}.log").read_text()[-3000:]
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = {task: json.load(open(out)) for task, (_, out) in procs.items() if task != "ps"}
    for task in ("chief", "worker"):  # the step grew every step: no false StepCounterHook warning
        assert "has not been increased" not in (tmp_path / f"{task}.log").read_text()
    chief_losses, worker_losses = records["chief"]["losses"], records["worker"]["losses"]
    assert records["chief"]["is_chief"] and not records["worker"]["is_chief"]
    assert chief_losses and worker_losses  # both trainers took steps on the shared variables
    assert max_steps <= len(chief_losses) + len(worker_losses) <= max_steps + 2  # a step may race the stop
    # A single-process Estimator reads the cluster's checkpoints.
    single = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), model_dir)
    step = int(single.get_variable_value("global_step"))
    assert step >= max_steps
    final = single.evaluate(models.eval_input_fn, name="single")
    assert final["loss"] < 0.5 * _initial_eval_loss()  # the model trained
    assert np.mean(chief_losses[-10:]) < np.mean(chief_losses[:10])
    # The evaluator's last result is that of the last checkpoint.
    evaluated = records["evaluator"]["eval"]
    assert evaluated["global_step"] == step
    assert evaluated["loss"] == pytest.approx(float(final["loss"]), rel=1e-6)


@pytest.mark.parametrize("task,index", [("master", 0), ("worker", 0), ("worker", 1)])
def test_legacy_master_cluster_moves_summaries_to_worker_0(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, task: str, index: int
) -> None:
    """With ``master`` and ``worker`` jobs, tf.estimator took summaries and step counting
    off the master and gave them to worker 0 (the session itself is not started here)."""
    from unittest import mock

    from tf_bridge.runtime.runner import train as runner_train

    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "master": ["127.0.0.1:4"]}
    _set_tf_config(monkeypatch, cluster=cluster, task={"type": task, "index": index})
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
    with mock.patch.object(runner_train.tf_training, "MonitoredTrainingSession") as session:
        session.return_value.__enter__.return_value.should_stop.return_value = True
        est.train(models.train_input_fn, steps=1)
    kwargs = session.call_args.kwargs
    assert kwargs["save_summaries_steps"] == 0 and kwargs["log_step_count_steps"] is None
    assert kwargs["is_chief"] == (task == "master") and kwargs["master"] == "grpc://" + cluster[task][index]
    kinds = {type(h) for h in kwargs["hooks"]}
    on_worker_0 = task == "worker" and index == 0
    assert (tf.compat.v1.train.SummarySaverHook in kinds) == on_worker_0
    assert (tf.compat.v1.train.StepCounterHook in kinds) == on_worker_0


def test_in_memory_evaluator_refuses_a_cluster(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for cluster in ({"chief": ["h:0"], "worker": ["h:1"]}, {"chief": ["h:0"], "ps": ["h:1"]}):
        _set_tf_config(monkeypatch, cluster=cluster, task={"type": "chief", "index": 0})
        est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
        with pytest.raises(ValueError, match="one training process"):
            tf_bridge.runtime.hooks.InMemoryEvaluatorHook(est, models.eval_input_fn)


def test_stop_at_checkpoint_step_hook(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chief gets TF's StopAtStepHook; a worker a hook that stops once model_dir's
    checkpoint is at last_step (here: the chief's checkpoint, through a shared server)."""
    server = tf.distribute.Server.create_local_server()

    def estimator(task: str) -> tf_bridge.Estimator:
        _set_tf_config(
            monkeypatch,
            cluster={"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
            task={"type": task, "index": 0},
            session_master=server.target,
        )
        config = tf_bridge.RunConfig(session_config=tf.compat.v1.ConfigProto(), log_step_count_steps=None)
        return tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path), config=config)

    chief = estimator("chief")
    assert isinstance(
        tf_bridge.runtime.hooks.make_stop_at_checkpoint_step_hook(chief, 4), tf.compat.v1.train.StopAtStepHook
    )
    chief.train(models.train_input_fn, max_steps=4)
    worker = estimator("worker")
    hook = tf_bridge.runtime.hooks.make_stop_at_checkpoint_step_hook(worker, 4, wait_after_file_check_secs=0)
    assert not isinstance(hook, tf.compat.v1.train.StopAtStepHook)
    losses: list[float] = []
    worker = tf_bridge.Estimator(
        models.make_linear_model_fn(tf_bridge, losses), str(tmp_path), config=worker.config
    )
    worker.train(models.train_input_fn, hooks=[hook])  # no steps / max_steps: only the hook stops it
    assert len(losses) == 1  # the checkpoint is at 4 already: one step, then stop


def test_early_stopping_reaches_the_workers(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chief's early-stopping hook sets ``signal_early_stopping/STOP`` (on the shared
    server); a worker's hook stops on it after one step, as under tf.estimator."""
    server = tf.distribute.Server.create_local_server()

    def estimator(task: str, losses: list[float]) -> tf_bridge.Estimator:
        _set_tf_config(
            monkeypatch,
            cluster={"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
            task={"type": task, "index": 0},
            session_master=server.target,
        )
        config = tf_bridge.RunConfig(session_config=tf.compat.v1.ConfigProto(), log_step_count_steps=None)
        return tf_bridge.Estimator(
            models.make_linear_model_fn(tf_bridge, losses), str(tmp_path), config=config
        )

    chief_losses: list[float] = []
    chief = estimator("chief", chief_losses)
    stop_at_3 = tf_bridge.runtime.hooks.make_early_stopping_hook(
        chief, lambda: len(chief_losses) >= 3, run_every_secs=None, run_every_steps=1
    )
    chief.train(models.train_input_fn, hooks=[stop_at_3], max_steps=100)
    # The hook runs before the spec's loss recorder: it sees 3 losses after step 4.
    assert len(chief_losses) == 4
    assert bool(chief.get_variable_value("signal_early_stopping/STOP"))  # in the checkpoint, as TF
    worker_losses: list[float] = []
    worker = estimator("worker", worker_losses)
    hook = tf_bridge.runtime.hooks.make_early_stopping_hook(worker, lambda: False)
    worker.train(models.train_input_fn, hooks=[hook], max_steps=100)
    assert len(worker_losses) == 1
