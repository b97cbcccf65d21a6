"""Unit tests of the loop's parts on their own (the behaviour suites drive them through
an Estimator): the pipelined loop skeleton, the feeder's step groups, the state
lifecycle (init, scaffold, the state kept in memory between calls, restore)."""

from __future__ import annotations

import dataclasses
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.config.run_config import InputPipelineConfig
from jaxspec.engine.steps import StepEngine
from jaxspec.estimators._model_fn import ModelFnCaller, estimator_spec_check
from jaxspec.loop.feeder import StepFeeder
from jaxspec.loop.pipeline import InFlight, run_pipelined
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.state_lifecycle import StateLifecycle
from jaxspec.store.checkpoints import CheckpointStore

# -- the pipelined loop skeleton -----------------------------------------------------------


class _Script:
    """A fake input of ``loops`` loops, recording the order of reads, hook calls and
    accounts; ``fail_at`` makes reading that loop raise, ``stop_at`` stops at that loop."""

    def __init__(
        self, loops: int, fail_at: int | None = None, stop_at: int | None = None, donate: bool = False
    ) -> None:
        self.loops, self.fail_at, self.stop_at, self.donate = loops, fail_at, stop_at, donate
        self.events: list[str] = []

    def dispatch(self, previous, before_run):
        k = 0 if previous is None else previous.first + 1
        if k == self.fail_at:
            raise OSError(f"input {k}")
        if k >= self.loops:
            return None
        if before_run is not None:
            before_run()
        self.events.append(f"dispatch {k}")
        return InFlight(k, 1, f"out {k}", took_previous=self.donate and before_run is None)

    def before_run(self):
        self.events.append("before_run")

    def account(self, loop, state_taken):
        assert loop.out == f"out {loop.first}"
        self.events.append(f"account {loop.first}" + (" (state taken)" if state_taken else ""))
        return loop.first == self.stop_at


def test_pipelined_loop_dispatches_ahead_and_orders_hooks():
    script = _Script(3)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=True)
    assert script.events == [
        "before_run", "dispatch 0",
        "dispatch 1", "account 0", "before_run",
        "dispatch 2", "account 1", "before_run",
        "account 2",
    ]  # fmt: skip


def test_loop_without_pipelining_dispatches_after_each_account():
    script = _Script(2)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=False)
    assert script.events == ["before_run", "dispatch 0", "account 0", "before_run", "dispatch 1", "account 1"]


def test_a_stop_drops_the_loop_dispatched_ahead():
    script = _Script(5, stop_at=1)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=True)
    assert script.events[-2:] == ["dispatch 2", "account 1"]  # loop 2 ran ahead, never accounted
    assert script.events.count("before_run") == 2


def test_a_loop_ahead_that_took_the_state_is_accounted_even_after_a_stop():
    """Donation travels with the dispatch: the loop ahead says it took loop k's state,
    loop k's account is told so, and a stop at loop k (a SIGTERM) accounts for the loop
    ahead instead of dropping it (loop k's state no longer exists)."""
    script = _Script(5, stop_at=1, donate=True)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=True)
    assert script.events == [
        "before_run", "dispatch 0",
        "dispatch 1", "account 0 (state taken)", "before_run",
        "dispatch 2", "account 1 (state taken)", "before_run",
        "account 2",
    ]  # fmt: skip
    # Without pipelining no dispatch is ahead, so nothing is taken.
    script = _Script(3, donate=True)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=False)
    assert not any("taken" in e for e in script.events)


def test_an_input_error_ahead_waits_until_the_loop_before_is_accounted():
    script = _Script(5, fail_at=2)
    with pytest.raises(OSError, match="input 2"):
        run_pipelined(script.dispatch, script.account, script.before_run, pipelined=True)
    assert script.events[-1] == "account 1"
    # ... and is not raised at all when that loop asked to stop.
    script = _Script(5, fail_at=2, stop_at=1)
    run_pipelined(script.dispatch, script.account, script.before_run, pipelined=True)
    assert script.events[-1] == "account 1"


# -- the feeder ------------------------------------------------------------------------------


def test_feeder_stacks_groups_and_starts_a_new_one_at_a_new_shape():
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(4)] + [np.ones((2, 3), np.float32)]
    batches = iter([({"x": x}, x[:, 0]) for x in xs])
    feeder = StepFeeder(batches, jaxspec.ModeKeys.TRAIN, 1, InputPipelineConfig.PER_HOST_V1)
    first = feeder.next_step()
    feeder.push_back(first)
    assert feeder.peek_step() is first
    groups = [feeder.next_group(3) for _ in range(3)]
    assert [g.steps for g in groups] == [3, 1, 1]  # 3 full ones, the 4th, then the short 5th
    np.testing.assert_array_equal(groups[0].batch[0]["x"], np.stack(xs[:3]))
    np.testing.assert_array_equal(groups[0].batch[1], np.stack([x[:, 0] for x in xs[:3]]))
    np.testing.assert_array_equal(groups[0].mask, np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(groups[2].batch[0]["x"], xs[4][None])
    assert feeder.next_group(3) is None


def test_feeder_copies_every_batch_of_a_reused_buffer_and_ends_a_group_at_another_dtype():
    """An input filling one buffer for every batch: each step of a group holds its own
    batch; labels of another dtype at step 5 start a new group; the input ends part-way
    through the last one; every row is counted."""
    data = np.random.default_rng(1).normal(size=(7, 4, 3)).astype(np.float32)
    buffer = np.empty((4, 3), np.float32)

    def batches():
        for i, x in enumerate(data):
            buffer[:] = x
            yield {"x": buffer}, np.full(4, i, np.int64 if i == 5 else np.int32)

    feeder = StepFeeder(batches(), jaxspec.ModeKeys.TRAIN, 1, InputPipelineConfig.PER_HOST_V1)
    groups = [feeder.next_group(10) for _ in range(3)]
    assert [g.steps for g in groups] == [5, 1, 1]
    np.testing.assert_array_equal(groups[0].batch[0]["x"], data[:5])
    np.testing.assert_array_equal(groups[0].batch[1], np.repeat(np.arange(5, dtype=np.int32)[:, None], 4, 1))
    np.testing.assert_array_equal(groups[0].mask, np.ones((5, 4), np.float32))
    assert groups[1].batch[1].dtype == np.int64 and (groups[1].batch[1] == 5).all()
    np.testing.assert_array_equal(groups[2].batch[0]["x"], data[6:])
    assert feeder.examples_seen == 7 * 4
    assert feeder.next_group(10) is None


# -- the state lifecycle ---------------------------------------------------------------------


def _model_fn(features, labels, mode, state):
    loss = jnp.mean((features["x"] @ state["w"] - labels) ** 2)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=jax.tree.map(lambda w: w * 0.5, state))


def _init_fn(features):
    return {"w": jnp.full((features["x"].shape[1],), 2.0, jnp.float32)}


def _plan(tmp_path) -> RunPlan:
    config = jaxspec.RunConfig(model_dir=str(tmp_path), log_step_count_steps=None, save_summary_steps=None)
    return RunPlan(
        mode=jaxspec.ModeKeys.TRAIN,
        model_fn=ModelFnCaller(_model_fn, estimator_spec_check),
        init_fn=_init_fn,
        config=config,
        store=CheckpointStore(str(tmp_path)),
    )


def _engine(plan: RunPlan) -> StepEngine:
    return StepEngine(plan.model_fn, {plan.mode: {}}, plan.config, None)


def test_state_lifecycle_inits_scaffolds_keeps_and_restores(tmp_path):
    plan = _plan(tmp_path)
    batch = ({"x": np.ones((4, 3), np.float32)}, np.zeros(4, np.float32))
    engine = _engine(plan)
    life = StateLifecycle(plan, engine, batch)
    assert life.restored_step is None and life.global_step == 0
    assert [(s.shape, s.dtype) for s in jax.tree.leaves(life.abstract_state)] == [((3,), jnp.float32)]
    scaffold = jaxspec.Scaffold(init_fn=lambda s: {"w": s["w"] + 1.0})
    life.create_state(batch, scaffold)
    np.testing.assert_array_equal(np.asarray(life.state["w"]), np.full(3, 3.0, np.float32))  # 2 + 1

    saved = plan.store.save(7, life.state)
    plan.store.wait()
    life.advance(types.SimpleNamespace(state=life.state), 7, donated=False)  # a loop of 7 steps
    assert life.global_step == 7
    assert saved is not None and saved.step == 7
    life.finish()
    assert plan.compile_cache.live.step == 7

    # The next call restores step 7: from memory while the directory on disk is unchanged.
    again = StateLifecycle(plan, engine, batch)
    assert again.restored_step == 7
    kept = plan.compile_cache.live.state
    again.create_state(batch, scaffold)
    assert again.state is kept  # no read from disk, no scaffold
    assert plan.compile_cache.live is None  # training donates it to its first loop: not kept
    again.finish()  # the call's end (at the restored step 7) keeps its state again
    assert plan.compile_cache.live.state is kept

    # A checkpoint rewritten on disk (a new directory identity) is read back instead.
    path = plan.store.path(7)
    os.rename(path, path + ".moved")
    os.rename(path + ".moved", path)
    os.utime(path, ns=(1, 1))
    fresh = StateLifecycle(dataclasses.replace(plan, store=CheckpointStore(str(tmp_path))), engine, batch)
    fresh.create_state(batch, scaffold)
    assert fresh.state is not kept
    assert plan.compile_cache.live is None  # a restore for training is not kept (donated)
    np.testing.assert_array_equal(np.asarray(fresh.state["w"]), np.full(3, 3.0, np.float32))
