"""What each hook says it needs of the state (reads_state_after, may_stop_after,
last_step), the safe answers for hooks that do not say, and a user's hook that opts in."""

from __future__ import annotations

import numpy as np

import jaxspec
from jaxspec.hooks.checkpoint import CheckpointSaverHook, CheckpointSaverListener
from jaxspec.hooks.early_stopping import make_early_stopping_hook
from jaxspec.loop.donated_state import state_free_after, state_read_at
from jaxspec.spec.hooks import may_stop, reads_state, stop_step
from tests.test_grouping import BATCH, _data, _estimator, _order, batches_input_fn


class _DuckHook:
    """A TF-style hook that does not derive from jaxspec's base and knows no protocol."""

    def after_run(self, run_context, run_values):
        pass


class _SubclassedLogger(jaxspec.LoggingTensorHook):
    def after_run(self, run_context, run_values):  # may now read the state or stop
        super().after_run(run_context, run_values)


def test_each_hook_answers_and_unknown_hooks_get_the_safe_answers(tmp_path):
    quiet = [
        jaxspec.LoggingTensorHook(["loss"], every_n_iter=5),
        jaxspec.StepCounterHook(every_n_steps=5),
        jaxspec.SummarySaverHook(save_steps=5, summary_op={"l": "loss"}),
        jaxspec.FinalOpsHook("loss"),
        jaxspec.ProfilerHook(save_steps=5, output_dir=str(tmp_path)),
        jaxspec.NanTensorHook("loss"),  # fails on NaN: the state is gone anyway
    ]
    for hook in quiet:
        assert reads_state(hook, 7) is False and may_stop(hook, 7) is False, type(hook).__name__
    assert state_free_after(quiet, 7)
    assert may_stop(jaxspec.NanTensorHook("loss", fail_on_nan_loss=False), 7)

    stop = jaxspec.StopAtStepHook(last_step=12)
    assert stop_step(stop) == 12 and reads_state(stop, 11) is False
    assert not may_stop(stop, 11) and may_stop(stop, 12)
    assert stop_step(jaxspec.StopAtStepHook(num_steps=3)) is None  # known once the session exists

    saver = CheckpointSaverHook(str(tmp_path), save_steps=4)
    saver._timer.update_last_triggered_step(0)
    assert reads_state(saver, 4) is True and reads_state(saver, 3) is False
    assert not may_stop(saver, 4)  # no listener: nothing can stop at a save
    with_listener = CheckpointSaverHook(str(tmp_path), save_steps=4, listeners=[CheckpointSaverListener()])
    with_listener._timer.update_last_triggered_step(0)
    assert may_stop(with_listener, 4) and not may_stop(with_listener, 3)
    assert state_read_at([saver], 4) and not state_read_at([saver], 3)

    est = _estimator(tmp_path / "m", True)
    by_steps = make_early_stopping_hook(est, lambda: False, run_every_secs=None, run_every_steps=10)
    by_steps._timer.update_last_triggered_step(0)
    assert reads_state(by_steps, 10) is False and may_stop(by_steps, 10) and not may_stop(by_steps, 9)
    assert may_stop(make_early_stopping_hook(est, lambda: False, run_every_secs=60), 3)  # time decides

    for unknown in (jaxspec.SessionRunHook(), _DuckHook(), _SubclassedLogger(["loss"], every_n_iter=5)):
        assert reads_state(unknown, 7) is None and may_stop(unknown, 7), type(unknown).__name__
        assert stop_step(unknown) is None
        assert not state_free_after([unknown], 7) and not state_read_at([unknown], 7)
    assert jaxspec.SessionRunHook().reads_state_after(7) is True  # the base's safe default
    assert jaxspec.SessionRunHook().may_stop_after(7) is True


class _LossEveryTen(jaxspec.SessionRunHook):
    """The protocol's example: reads the loss every 10 steps, never the state, never stops."""

    def __init__(self):
        self.seen = []

    def next_required_step(self, global_step):
        return (global_step // 10 + 1) * 10

    def reads_state_after(self, step):
        return False

    def may_stop_after(self, step):
        return False

    def before_run(self, run_context):
        return jaxspec.SessionRunArgs("loss")

    def after_run(self, run_context, run_values):
        self.seen.append((run_context.session.global_step, float(run_values.results)))


def test_a_user_hook_that_opts_in_keeps_the_loops_dispatched_ahead(tmp_path, monkeypatch):
    """With a hook that says it reads no state, loop k+1 is dispatched before loop k's
    after_run, as with tf.estimator's default hooks alone; it sees every tenth step."""
    x, y = _data(10 * BATCH)
    events = _order(monkeypatch)
    est = _estimator(tmp_path, True, log_step_count_steps=None, save_summary_steps=None)
    est.train(batches_input_fn(x, y, BATCH, repeat=True), steps=10)  # compiles; times a scan
    events.clear()
    hook = _LossEveryTen()
    est.train(batches_input_fn(x, y, BATCH, repeat=True), hooks=[hook], steps=30)
    assert events == [
        ("dispatch", 10),
        ("dispatch", 20),
        ("after_run", 20),
        ("dispatch", 30),
        ("after_run", 30),
        ("after_run", 40),
    ]
    assert [s for s, _ in hook.seen] == [20, 30, 40] and np.isfinite([v for _, v in hook.seen]).all()
