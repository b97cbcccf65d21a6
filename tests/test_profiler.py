"""ProfilerHook (issue 36, item 3): a trace's StepTraceAnnotations, read back from the
``*.xplane.pb`` the profiler writes (with jax's own ``ProfileData``), cover exactly the
window asked for, grouped steps split at its edges, and never the compiling first loop
unless the window starts there."""

from __future__ import annotations

import glob
import os

import pytest
from helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn
from jax.profiler import ProfileData

import jaxspec
from jaxspec.spec.hooks import required_step

X, Y = digits(160)


def _traced_calls(trace_dir: str, run: str = "*") -> list[tuple[int, int]]:
    """(step_num, steps) of every ``train`` StepTraceAnnotation in the trace(s) (of the
    profile plugin's ``run`` directories)."""
    files = glob.glob(os.path.join(trace_dir, "plugins", "profile", run, "*.xplane.pb"))
    assert files, os.listdir(trace_dir)
    calls = []
    for path in files:
        for plane in ProfileData.from_file(path).planes:
            for line in plane.lines:
                for event in line.events:
                    stats = dict(event.stats)
                    if event.name == "train" and "step_num" in stats:
                        calls.append((int(stats["step_num"]), int(stats["steps"])))
    return sorted(calls)


def _runs(trace_dir: str) -> dict[str, list[tuple[int, int]]]:
    """The profile plugin's runs (one per trace), each with its traced calls."""
    root = os.path.join(trace_dir, "plugins", "profile")
    return {run: _traced_calls(trace_dir, run) for run in sorted(os.listdir(root))}


def _train(tmp_path, hook, steps=20, steps_per_execution="auto"):
    config = fast_config(str(tmp_path / "m"), steps_per_execution=steps_per_execution)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    est.train(batches_input_fn(X, Y, 16, repeat=True), hooks=[hook], steps=steps)


def test_a_window_traces_exactly_its_steps_split_at_its_edges(tmp_path):
    trace = str(tmp_path / "trace")
    _train(tmp_path, jaxspec.ProfilerHook(output_dir=trace, start_step=5, num_steps=6))
    calls = _traced_calls(trace)
    covered = [s for first, n in calls for s in range(first, first + n)]
    assert covered == list(range(5, 11)), calls  # runs starting at steps 5 .. 10, once each
    assert any(n > 1 for _, n in calls), calls  # grouped inside the window


def test_save_steps_skips_the_compiling_first_loop(tmp_path):
    trace = str(tmp_path / "trace")
    _train(tmp_path, jaxspec.ProfilerHook(save_steps=6, output_dir=trace), steps=10)
    assert _traced_calls(trace) == [(5, 1)]  # the run ending at step 6, as tf.estimator's


@pytest.mark.parametrize("steps_per_execution", ["auto", 1])
def test_save_steps_traces_a_window_every_n_steps(tmp_path, steps_per_execution):
    """Issue 46 item 3: save_steps=10 over 45 steps traces the runs ending at 10, 20, 30
    and 40, each into a run directory of its own (grouped or not), even when they all end
    within one second."""
    trace = str(tmp_path / "trace")
    _train(tmp_path, jaxspec.ProfilerHook(save_steps=10, output_dir=trace), 45, steps_per_execution)
    runs = _runs(trace)
    assert sorted(runs.values()) == [[(9, 1)], [(19, 1)], [(29, 1)], [(39, 1)]], runs
    for run, calls in runs.items():
        assert run.endswith(f"_step_{calls[0][0]}"), runs


def test_save_secs_traces_again_and_again(tmp_path):
    """save_secs=0: every run after the first is due, so each is traced, in its own run."""
    trace = str(tmp_path / "trace")
    _train(tmp_path, jaxspec.ProfilerHook(save_secs=0, output_dir=trace), 6, steps_per_execution=1)
    runs = _runs(trace)
    assert sorted(runs.values()) == [[(s, 1)] for s in range(1, 6)], runs


def test_window_edges_are_required_steps():
    session = type("S", (), {"global_step": 0})()
    hook = jaxspec.ProfilerHook(save_steps=10, output_dir="/nonexistent")
    hook.after_create_session(session, None)
    assert [required_step(hook, g) for g in (0, 8, 9)] == [9, 9, 10]
    # asked ahead of after_run, the next windows already count (the loop reads ahead)
    assert [required_step(hook, g) for g in (10, 18, 19, 20)] == [19, 19, 20, 29]
    assert hook.reads_state_after(19) and hook.reads_state_after(30) and not hook.reads_state_after(25)
    assert hook.reads_state_after(9) and hook.reads_state_after(10) and not hook.reads_state_after(5)
    one = jaxspec.ProfilerHook(save_steps=1, output_dir="/nonexistent")
    one.after_create_session(session, None)
    assert required_step(one, 0) == 1 and required_step(one, 1) == 2  # never the first run
    window = jaxspec.ProfilerHook(start_step=3, num_steps=4)
    assert [required_step(window, g) for g in (0, 3, 6, 7)] == [3, 7, 7, jaxspec.spec.hooks.NEVER]
    with pytest.raises(ValueError):
        jaxspec.ProfilerHook(save_steps=2, start_step=3)
    with pytest.raises(ValueError):
        jaxspec.ProfilerHook(start_step=3, num_steps=0)
