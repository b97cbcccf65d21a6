"""Step accounting, warm start, summaries read back, checkpoint paths, model_dir moves."""

from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import pytest

import jaxspec
from jaxspec.config.warm_start_settings import WarmStartSettings
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn


class LoopSizes(jaxspec.SessionRunHook):
    def __init__(self):
        self.steps = []

    def before_run(self, run_context):
        return jaxspec.SessionRunArgs("global_step")

    def after_run(self, run_context, run_values):
        self.steps.append(int(run_values.results))


def _est(path, ipl=4, **kwargs):
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(path), ipl, **kwargs),
        train_batch_size=32,
        eval_batch_size=32,
        init_fn=init_fn,
    )


def _data(n=32):
    x, y = digits(n)
    return x, y, (lambda: ({"x": x}, y))


def test_steps_relative_and_max_steps_absolute(tmp_path):
    _, _, input_fn = _data()
    est, sizes = _est(tmp_path), LoopSizes()
    est.train(input_fn, steps=10, hooks=[sizes])
    assert np.diff([0] + sizes.steps).tolist() == [4, 4, 2]
    sizes.steps.clear()
    est.train(input_fn, steps=3, hooks=[sizes])
    assert sizes.steps == [13]
    for bad in (dict(steps=0), dict(max_steps=-1), dict(steps=1, max_steps=2)):
        with pytest.raises(ValueError):
            est.train(input_fn, **bad)


def test_max_steps_from_step_3(tmp_path):
    _, _, input_fn = _data()
    est = _est(tmp_path)
    est.train(input_fn, steps=3)
    sizes = LoopSizes()
    est.train(input_fn, max_steps=10, hooks=[sizes])
    assert np.diff([3] + sizes.steps).tolist() == [4, 3]


def test_finite_input_ends_training_and_evaluation(tmp_path):
    x, y, _ = _data(96)
    est = _est(tmp_path, ipl=2)
    est.train(batches_input_fn(x, y, 32), steps=100)  # three batches, then the input ends
    assert est._checkpoint_store().latest_step() == 3
    full = est.evaluate(batches_input_fn(x, y, 32))
    part = est.evaluate(batches_input_fn(x, y, 32), steps=1)
    first = est.evaluate(batches_input_fn(x[:32], y[:32], 32))
    assert part["accuracy"] == pytest.approx(first["accuracy"])
    assert full["global_step"] == 3


def test_warm_start(tmp_path):
    """Adam's first step moves each parameter by at most the learning rate (0.05), so
    after one step a warm-started leaf is within 0.05 of the source's value. The source
    keeps a checkpoint per step: its step 1 is a fresh (not warm-started) one-step run,
    the same init_fn, batch and seed."""
    _, _, input_fn = _data()
    source = _est(tmp_path / "source", 1, save_checkpoints_steps=1, keep_checkpoint_max=None)
    source.train(input_fn, steps=5)
    out, hidden = "params/params/Dense_0/kernel", "params/params/Dense_1/kernel"
    trained, fresh = source._checkpoint_store().read(), source._checkpoint_store().read(1)
    assert int(trained["step"]) == 5 and int(fresh["step"]) == 1

    def one_step(name, **kwargs):
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=fast_config(str(tmp_path / name), 1),
            train_batch_size=32,
            init_fn=init_fn,
            **kwargs,
        )
        est.train(input_fn, steps=1)
        return est

    def gap(est, want, name):
        return np.abs(est.get_variable_value(name) - want[name]).max()

    warm = one_step("warm", warm_start_from=str(tmp_path / "source"))
    assert warm.get_variable_value("step") == 1  # the optimizer state is not warm-started
    assert gap(warm, trained, out) <= 0.05 + 1e-6 and gap(warm, trained, hidden) <= 0.05 + 1e-6
    assert np.abs(fresh[hidden] - trained[hidden]).max() > 0.1

    only_hidden = one_step(
        "hidden",
        warm_start_from=WarmStartSettings(
            str(tmp_path / "source"), vars_to_warm_start="params/params/Dense_1/.*"
        ),
    )
    assert gap(only_hidden, trained, hidden) <= 0.05 + 1e-6
    assert gap(only_hidden, fresh, out) <= 0.1 + 1e-6 < gap(only_hidden, trained, out)

    with pytest.raises(ValueError, match="shape"):  # a [10] bias cannot warm-start a [16] one
        one_step(
            "renamed",
            warm_start_from=WarmStartSettings(
                str(tmp_path / "source"),
                vars_to_warm_start="params/params/Dense_1/bias",
                var_name_to_prev_var_name={"params/params/Dense_1/bias": "params/params/Dense_0/bias"},
            ),
        )


def _scalars(logdir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(logdir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def test_event_files_read_back(tmp_path):
    _, _, input_fn = _data()
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_summary_steps=2,
        log_step_count_steps=4,
        save_checkpoints_secs=None,
        save_checkpoints_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=3),
    )
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=config, train_batch_size=32, eval_batch_size=32, init_fn=init_fn
    )
    est.train(input_fn, steps=8)
    losses = _scalars(str(tmp_path), "loss")
    # TF 2.15's steps: the loss at the call's first step and every 2 after it; the rate
    # where 4 steps have passed since the first loop's end (3), checked at loop ends (6, 8)
    assert [s for s, _ in losses] == [1, 3, 5, 7] and all(np.isfinite(v) for _, v in losses)
    rates = _scalars(str(tmp_path), "global_step/sec")
    assert [s for s, _ in rates] == [8]
    examples = _scalars(str(tmp_path), "examples/sec")
    assert [s for s, _ in examples] == [8] and examples[0][1] == pytest.approx(32 * rates[0][1], rel=1e-6)
    result = est.evaluate(input_fn, name="holdout")
    acc = _scalars(str(tmp_path / "eval_holdout"), "accuracy")
    assert acc == [(8, pytest.approx(result["accuracy"], abs=1e-6))]
    jaxspec.summary.histogram("weights", np.arange(10.0), 3, str(tmp_path / "custom"))
    jaxspec.summary.scalar("custom", 1.5, 3, str(tmp_path / "custom"))
    jaxspec.summary.flush(str(tmp_path / "custom"))
    assert _scalars(str(tmp_path / "custom"), "custom") == [(3, 1.5)]


def test_checkpoint_path_and_moved_model_dir(tmp_path):
    _, _, input_fn = _data()
    est = _est(tmp_path / "a", save_checkpoints_steps=2)
    est.train(input_fn, steps=2)
    at_2 = est.evaluate(input_fn)
    est.train(input_fn, steps=2)
    old = est.evaluate(input_fn, checkpoint_path=os.path.join(est.model_dir, "checkpoints", "2"))
    assert old == pytest.approx(at_2)
    shutil.move(str(tmp_path / "a"), str(tmp_path / "b"))
    moved = _est(tmp_path / "b")
    assert moved.evaluate(input_fn)["global_step"] == 4
    other = _est(tmp_path / "c")
    from_b = other.evaluate(input_fn, checkpoint_path=os.path.join(str(tmp_path / "b"), "checkpoints", "2"))
    assert from_b["accuracy"] == pytest.approx(at_2["accuracy"])
    assert glob.glob(str(tmp_path / "b" / "checkpoints" / "4"))


def test_iterations_per_loop_as_a_duration(tmp_path):
    _, _, input_fn = _data()
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop="1s"),
    )
    est = jaxspec.TPUEstimator(make_model_fn(), config=config, train_batch_size=32, init_fn=init_fn)
    sizes = LoopSizes()
    est.train(input_fn, steps=40, hooks=[sizes])
    loop_sizes = np.diff([0] + sizes.steps).tolist()
    assert loop_sizes[:2] == [1, 1] and sum(loop_sizes) == 40
    assert loop_sizes[2] > 1  # sized by time: a CPU step of this model takes well under 0.5 s
