"""Hooks: call order and counts per step and per loop, fetches, standard hooks."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import jaxspec
from jaxspec.hooks import (
    CheckpointSaverListener,
    FinalOpsHook,
    LoggingTensorHook,
    NanTensorHook,
    StopAtStepHook,
)
from tests.helpers import digits, fast_config, init_fn, make_model_fn


class Recorder(jaxspec.SessionRunHook):
    def __init__(self, name, log, fetches=("loss", "global_step")):
        self.name, self.log, self.fetches = name, log, list(fetches)
        self.results = []

    def begin(self):
        self.log.append((self.name, "begin"))

    def after_create_session(self, session, coord):
        self.log.append((self.name, "after_create_session", int(session.global_step)))

    def before_run(self, run_context):
        self.log.append((self.name, "before_run"))
        return jaxspec.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.log.append((self.name, "after_run"))
        self.results.append(run_values.results)

    def end(self, session):
        self.log.append((self.name, "end"))


def _data():
    x, y = digits(32)
    return lambda: ({"x": x}, y)


def _spec_hook_model_fn(log):
    inner = make_model_fn()

    def model_fn(features, labels, mode, params, state, global_step):
        spec = inner(features, labels, mode, params, state, global_step)
        hook = Recorder("spec", log, fetches=["loss", "doubled"])
        hook.step_tensors = lambda: {"doubled": spec.loss * 2}
        return spec._replace(training_hooks=[hook])

    return model_fn


@pytest.mark.parametrize("iterations_per_loop,expected_runs", [(1, 7), (3, 3)])
def test_order_and_counts(tmp_path, iterations_per_loop, expected_runs):
    log = []
    user = Recorder("user", log)
    est = jaxspec.TPUEstimator(
        _spec_hook_model_fn(log),
        config=fast_config(str(tmp_path), iterations_per_loop),
        train_batch_size=32,
        init_fn=init_fn,
    )
    est.train(_data(), hooks=[user], steps=7)
    names = [e for e in log if e[1] != "before_run" and e[1] != "after_run"]
    assert names == [
        ("user", "begin"),
        ("spec", "begin"),
        ("user", "after_create_session", 0),
        ("spec", "after_create_session", 0),
        ("user", "end"),
        ("spec", "end"),
    ]
    runs = [e for e in log if e[1] == "after_run"]
    assert len(runs) == 2 * expected_runs
    assert [e[0] for e in log if e[1] == "before_run"][:2] == ["user", "spec"]
    steps = [int(r[1]) for r in user.results]
    assert steps == [min(iterations_per_loop * (i + 1), 7) for i in range(expected_runs)]
    assert sum(1 for e in runs if e[0] == "spec") == expected_runs


def test_stop_at_step_hook_shortens_the_loop(tmp_path):
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 4), train_batch_size=32, init_fn=init_fn
    )
    est.train(_data(), hooks=[StopAtStepHook(num_steps=6)])
    assert est._checkpoint_store().latest_step() == 6
    est.train(_data(), hooks=[StopAtStepHook(last_step=9)])
    assert est._checkpoint_store().latest_step() == 9
    with pytest.raises(ValueError):
        StopAtStepHook()


def test_request_stop_ends_training(tmp_path):
    class StopAfter(jaxspec.SessionRunHook):
        def after_run(self, run_context, run_values):
            run_context.request_stop()

    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 2), train_batch_size=32, init_fn=init_fn
    )
    est.train(_data(), hooks=[StopAfter()], steps=10)
    assert est._checkpoint_store().latest_step() == 2  # one loop of 2 steps


def test_logging_tensor_hook(tmp_path, caplog):
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    hook = LoggingTensorHook({"my_loss": "loss", "step": "global_step"}, every_n_iter=2, at_end=True)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est.train(_data(), hooks=[hook], steps=5)
    lines = [r.getMessage() for r in caplog.records if "my_loss" in r.getMessage()]
    assert [line.split("step = ")[1].split(" ")[0].rstrip(",") for line in lines] == ["1", "3", "5", "5"]
    with pytest.raises(ValueError):
        LoggingTensorHook(["loss"])


def test_final_ops_and_nan_hooks(tmp_path):
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    final = FinalOpsHook({"step": "global_step", "loss": "loss"})
    est.train(_data(), hooks=[final, NanTensorHook("loss")], steps=3)
    assert int(final.final_ops_values["step"]) == 3
    assert np.isfinite(final.final_ops_values["loss"])


def test_saving_listeners(tmp_path):
    calls = []

    class Listener(CheckpointSaverListener):
        def begin(self):
            calls.append("begin")

        def before_save(self, session, step):
            calls.append(("before", step))

        def after_save(self, session, step):
            calls.append(("after", step))

        def end(self, session, step):
            calls.append(("end", step))

    config = jaxspec.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=2, log_step_count_steps=None)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    est.train(_data(), steps=5, saving_listeners=[Listener()])
    assert calls == [
        "begin",
        ("before", 0),  # the save when the session is created, as TF's CheckpointSaverHook
        ("after", 0),
        ("before", 2),
        ("after", 2),
        ("before", 4),
        ("after", 4),
        ("before", 5),
        ("after", 5),
        ("end", 5),
    ]


def test_hook_fetching_an_unknown_name_fails(tmp_path):
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    with pytest.raises(ValueError, match="nope"):
        est.train(_data(), hooks=[Recorder("bad", [], fetches=["nope"])], steps=1)


def test_spec_hook_sees_its_own_step_tensor(tmp_path):
    seen = []

    def model_fn(features, labels, mode, params, state, global_step):
        spec = make_model_fn(as_estimator_spec=True)(features, labels, mode, params, state, global_step)

        class Probe(jaxspec.SessionRunHook):
            def step_tensors(self):
                return {"step_in_model_fn": global_step, "loss_in_model_fn": spec.loss}

            def before_run(self, run_context):
                return jaxspec.SessionRunArgs(["step_in_model_fn", "loss_in_model_fn", "loss", "global_step"])

            def after_run(self, run_context, run_values):
                seen.append(run_values.results)

        return spec._replace(training_hooks=[Probe()])

    config = fast_config(str(tmp_path), 2)
    est = jaxspec.TPUEstimator(model_fn, config=config, use_tpu=False, train_batch_size=32, init_fn=init_fn)
    est.train(_data(), steps=5)
    assert len(seen) == 3  # loops of 2, 2, 1
    for step_in_model_fn, loss_in_model_fn, loss, step in seen:
        assert int(step_in_model_fn) == int(step) - 1  # the loop's last step, before its update
        assert float(loss_in_model_fn) == pytest.approx(float(loss), abs=1e-7)


def test_profiler_hook_writes_a_trace(tmp_path):
    from jaxspec.hooks import ProfilerHook

    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path / "m")), init_fn=init_fn
    )
    est.train(_data(), hooks=[ProfilerHook(save_steps=2, output_dir=str(tmp_path / "trace"))], steps=3)
    traces = [f for _, _, files in __import__("os").walk(tmp_path / "trace") for f in files]
    assert any(f.endswith(".xplane.pb") for f in traces), traces


def test_own_checkpoint_saver_hook_replaces_the_default(tmp_path):
    from jaxspec.hooks import CheckpointSaverHook

    config = jaxspec.RunConfig(
        model_dir=str(tmp_path / "m"), save_checkpoints_steps=1, log_step_count_steps=None
    )
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    saver = CheckpointSaverHook(str(tmp_path / "elsewhere"), save_steps=2)
    est.train(_data(), hooks=[saver], steps=5)
    assert est._checkpoint_store().all_steps() == []  # the default saver (every step) was not added
    from jaxspec.store.checkpoints import CheckpointStore

    assert CheckpointStore(str(tmp_path / "elsewhere")).all_steps() == [0, 2, 4, 5]
    with pytest.raises(ValueError, match="saving_listeners"):
        est.train(_data(), hooks=[saver], steps=1, saving_listeners=[CheckpointSaverListener()])


def test_progress_lines_and_the_flag_that_turns_them_off(tmp_path, caplog):
    x, y = digits(48)
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        log_step_count_steps=2,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
    )
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est.train(_data(), steps=4)
        list(est.predict(lambda: ({"x": x[s : s + 8]} for s in range(0, 48, 8))))
    text = "\n".join(r.getMessage() for r in caplog.records)
    # TF 2.15's lines: at runs 1 and 3, each with the global step its run started from
    steps = re.findall(r"^loss = \S+, step = (\d+)", text, re.M)
    assert steps == ["0", "2"] and "global_step/sec" in text
    assert "Prediction: 6 batches, 48 examples" in text
    caplog.clear()
    quiet = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True),
        init_fn=init_fn,
        config=config.replace(log_step_count_steps=None, model_dir=str(tmp_path / "q")),
    )
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        quiet.train(_data(), steps=4)
    assert not [r for r in caplog.records if "global_step/sec" in r.getMessage()]
