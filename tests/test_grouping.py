"""Step grouping on a plain Estimator: the steps between the ones hooks need run as one
compiled loop; numbers, hook calls, summaries and checkpoints equal one step per run."""

from __future__ import annotations

import logging
import os
import signal
import types

import jax
import numpy as np
import optax
import pytest

import jaxspec
from jaxspec.hooks import basic as basic_hooks
from jaxspec.hooks import timer
from jaxspec.loop.compiled_loop import CompiledLoop
from jaxspec.loop.grouping import split_sizes
from jaxspec.loop.hook_runner import HookRunner
from jaxspec.spec.hooks import NEVER, required_step
from jaxspec.store.checkpoints import CheckpointStore
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn

BATCH = 16


def _config(model_dir, grouped: bool, **kwargs):
    return fast_config(str(model_dir), steps_per_execution="auto" if grouped else 1, **kwargs)


def _estimator(model_dir, grouped: bool, model_fn=None, **kwargs):
    return jaxspec.Estimator(
        model_fn or make_model_fn(as_estimator_spec=True),
        config=_config(model_dir, grouped, **kwargs),
        init_fn=init_fn,
    )


def _variables(est):
    return {n: np.asarray(est.get_variable_value(n)) for n in est.get_variable_names()}


def _data(rows=400):
    x, y = digits(rows)
    return x, y


def _hand_params(x, y, steps):
    """The same model trained by hand: one jitted step per batch, in order."""
    return _hand_params_at(x, y, [steps])[steps]


def _hand_params_at(x, y, at):
    """``{step: params after that many hand steps}`` for each step of ``at``, from one run."""
    state = init_fn(None, {"x": x[:BATCH]})

    @jax.jit
    def step(state, xb, yb):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn(p, xb), yb).mean()

        return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

    starts = [s for s in range(0, len(x), BATCH)]
    out = {}
    for i in range(max(at)):
        s = starts[i % len(starts)]
        state = step(state, x[s : s + BATCH], y[s : s + BATCH])
        if i + 1 in at:
            out[i + 1] = jax.device_get(state.params)
    return out


@pytest.mark.parametrize("steps", [37, 64])
def test_grouped_parameters_equal_single_steps_and_a_hand_loop(tmp_path, monkeypatch, steps):
    x, y = _data()
    out, dispatched = {}, []
    real = CompiledLoop.dispatch

    def counting(self, state, global_step, *args, **kwargs):
        rows = int(np.shape(jax.tree.leaves(args)[0])[0])
        dispatched.append((kwargs.get("block_steps") or rows, rows))
        return real(self, state, global_step, *args, **kwargs)

    monkeypatch.setattr(CompiledLoop, "dispatch", counting)
    for grouped in (True, False):
        dispatched.clear()
        est = _estimator(tmp_path / str(grouped), grouped, log_step_count_steps=10, save_summary_steps=10)
        est.train(batches_input_fn(x, y, BATCH, repeat=True), steps=steps)
        assert est.get_variable_value("global_step") == steps
        out[grouped] = _variables(est)
        ran = [n for n, _ in dispatched]
        assert sum(ran) == steps
        if not grouped:
            assert ran == [1] * steps
            continue
        # grouped: loops end at TF's measured steps (1, 11, 21, ...), each run by the one
        # block loop of 10 steps (the hooks' interval), whatever steps it runs
        assert {rows for _, rows in dispatched} == {10}
        ends = set(np.cumsum(ran).tolist())
        assert set(range(1, steps, 10)) <= ends and max(ends) == steps
    for name, value in out[False].items():
        np.testing.assert_allclose(out[True][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    hand = jax.tree_util.tree_flatten_with_path(_hand_params(x, y, steps))[0]
    for path, value in hand:
        name = "params/" + "/".join(str(getattr(k, "key", k)) for k in path)
        np.testing.assert_allclose(out[True][name], np.asarray(value), rtol=1e-4, atol=1e-5, err_msg=name)


class _Scalars:
    """Records every write_scalars call of the hooks module: (dir, step, {tag: value})."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = basic_hooks.write_scalars

        def record(directory, step, scalars):
            self.calls.append(
                (str(directory), int(step), {k: float(np.asarray(v)) for k, v in scalars.items()})
            )
            return real(directory, step, scalars)

        monkeypatch.setattr(basic_hooks, "write_scalars", record)


def _run_with_hooks(model_dir, grouped, x, y, caplog):
    calls = []

    def should_stop():
        calls.append(1)
        return len(calls) == 4  # decisions at steps 1, 8, 15, 22: stops at 22

    est = _estimator(
        model_dir, grouped, save_checkpoints_steps=8, keep_checkpoint_max=None, log_step_count_steps=10
    )
    hooks = [
        jaxspec.LoggingTensorHook({"the_loss": "loss", "gs": "global_step"}, every_n_iter=6),
        jaxspec.StepCounterHook(every_n_steps=5, output_dir=str(model_dir / "counter")),
        jaxspec.SummarySaverHook(save_steps=3, output_dir=str(model_dir / "sums"), summary_op={"l": "loss"}),
        jaxspec.StopAtStepHook(last_step=40),
        jaxspec.NanTensorHook("loss"),
        jaxspec.FinalOpsHook("loss"),
        jaxspec.hooks.make_early_stopping_hook(est, should_stop, run_every_secs=None, run_every_steps=7),
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est.train(batches_input_fn(x, y, BATCH, repeat=True), hooks=hooks, steps=100)
    logged = [r.getMessage().split(" (")[0] for r in caplog.records if "the_loss" in r.getMessage()]
    return est, logged, len(calls), hooks[5].final_ops_values


def test_every_jaxspec_hook_sees_the_same_steps_and_values(tmp_path, monkeypatch, caplog):
    x, y = _data()
    scalars = _Scalars(monkeypatch)
    runs = {}
    for grouped in (False, True):
        scalars.calls.clear()
        est, logged, decisions, final = _run_with_hooks(tmp_path / str(grouped), grouped, x, y, caplog)
        steps = {key: [(s, v) for d, s, v in scalars.calls if d.endswith(key)] for key in ("counter", "sums")}
        runs[grouped] = dict(
            step=int(est.get_variable_value("global_step")),
            checkpoints=est._checkpoint_store().all_steps(),
            logged=logged,
            decisions=decisions,
            final=float(final),
            counter=[s for s, _ in steps["counter"]],  # rates are timings: steps only
            sums=steps["sums"],
        )
    plain, grouped = runs[False], runs[True]
    assert plain["step"] == 22  # the early-stopping hook's 4th decision
    assert plain["checkpoints"] == [0, 8, 16, 22]  # step 0: saved when the session is created
    assert plain["counter"] == [6, 11, 16, 21]  # the first trigger (step 1) starts the clock
    assert [s for s, _ in plain["sums"]] == list(range(1, 23, 3))
    assert [t.split("gs = ")[1] for t in plain["logged"]] == ["1", "7", "13", "19"]
    assert grouped["step"] == plain["step"]
    assert grouped["checkpoints"] == plain["checkpoints"]
    assert grouped["counter"] == plain["counter"]
    assert grouped["decisions"] == plain["decisions"] == 4
    assert [s for s, _ in grouped["sums"]] == [s for s, _ in plain["sums"]]
    np.testing.assert_allclose(
        [v["l"] for _, v in grouped["sums"]], [v["l"] for _, v in plain["sums"]], rtol=1e-5
    )
    assert len(grouped["logged"]) == len(plain["logged"])
    for a, b in zip(grouped["logged"], plain["logged"], strict=True):
        la, lb = (float(t.split("the_loss = ")[1].split(",")[0]) for t in (a, b))
        assert a.split(", ")[1] == b.split(", ")[1] and la == pytest.approx(lb, rel=1e-5)
    assert grouped["final"] == pytest.approx(plain["final"], rel=1e-5)


class _EveryStep(jaxspec.SessionRunHook):
    def __init__(self):
        self.seen = []

    def before_run(self, run_context):
        return jaxspec.SessionRunArgs(["global_step", "loss"])

    def after_run(self, run_context, run_values):
        self.seen.append((int(run_values.results[0]), float(run_values.results[1]), run_context.iterations))


def test_a_user_hook_without_the_protocol_runs_every_step(tmp_path):
    x, y = _data()
    seen = {}
    for grouped in (True, False):
        hook = _EveryStep()
        _estimator(tmp_path / str(grouped), grouped).train(
            batches_input_fn(x, y, BATCH, True), [hook], steps=9
        )
        seen[grouped] = hook.seen
    assert [s for s, _, _ in seen[True]] == list(range(1, 10))
    assert all(i == 1 for _, _, i in seen[True])
    np.testing.assert_allclose([v for _, v, _ in seen[True]], [v for _, v, _ in seen[False]], rtol=1e-5)


class _SubclassedLogger(jaxspec.LoggingTensorHook):
    def after_run(self, run_context, run_values):
        super().after_run(run_context, run_values)


def test_schedules_of_the_hooks():
    counter = jaxspec.StepCounterHook(every_n_steps=5)
    counter.begin()
    assert required_step(counter, 0) == 1  # the first run starts its clock
    counter._timer.update_last_triggered_step(1)
    assert [required_step(counter, g) for g in (1, 3, 5, 6)] == [6, 6, 6, 11]
    assert required_step(jaxspec.StepCounterHook(every_n_steps=None, every_n_secs=2), 3) == NEVER
    stop = jaxspec.StopAtStepHook(last_step=12)
    assert required_step(stop, 4) == 12 and required_step(stop, 12) == 13
    assert required_step(jaxspec.NanTensorHook("loss"), 4) == NEVER
    assert required_step(jaxspec.NanTensorHook("loss", fail_on_nan_loss=False), 4) == 5
    assert required_step(jaxspec.FinalOpsHook("loss"), 4) == NEVER
    assert required_step(jaxspec.SessionRunHook(), 4) == NEVER  # nothing per step
    assert required_step(_SubclassedLogger(["loss"], every_n_iter=50), 4) == 5  # changed per step
    profiler = jaxspec.ProfilerHook(save_steps=10, output_dir="/nonexistent")
    profiler.after_create_session(type("S", (), {"global_step": 1})(), None)
    assert [required_step(profiler, g) for g in (1, 10, 11, 12)] == [10, 11, 20, 20]  # every 10 (issue 46)


def test_nan_tensor_hook_reads_every_step_of_a_loop():
    hook = jaxspec.NanTensorHook("loss")
    session = type("S", (), {"global_step": 20})()
    context = jaxspec.SessionRunContext(session=session, iterations=4)
    assert hook.before_run(context).fetches == "losses"
    with pytest.raises(jaxspec.NanLossDuringTrainingError) as err:
        hook.after_run(context, jaxspec.SessionRunValues(np.array([1.0, np.nan, np.nan, 2.0]), None, None))
    assert err.value.global_step == 17  # steps 16..19 ran; the second had the NaN


def test_nan_is_reported_at_its_exact_step(tmp_path):
    inner = make_model_fn(as_estimator_spec=True)

    def model_fn(features, labels, mode, params, state, global_step):
        spec = inner(features, labels, mode, params, state, global_step)
        return spec._replace(loss=jax.numpy.where(global_step == 13, jax.numpy.nan, spec.loss))

    x, y = _data()
    for grouped in (True, False):
        est = _estimator(tmp_path / str(grouped), grouped, model_fn=model_fn, log_step_count_steps=50)
        with pytest.raises(jaxspec.NanLossDuringTrainingError) as err:
            est.train(batches_input_fn(x, y, BATCH, True), hooks=[jaxspec.NanTensorHook("loss")], steps=40)
        assert err.value.global_step == 13


def test_input_ending_mid_group_and_a_short_last_batch_train_every_row(tmp_path):
    x, y = _data(23 * BATCH + 5)  # 23 full batches, then one of 5 rows
    out = {}
    for grouped in (True, False):
        est = _estimator(tmp_path / str(grouped), grouped, log_step_count_steps=10, save_summary_steps=10)
        est.train(batches_input_fn(x, y, BATCH))
        assert est.get_variable_value("global_step") == 24
        out[grouped] = _variables(est)
    for name, value in out[False].items():
        np.testing.assert_allclose(out[True][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_group_sizes_bound_compilations():
    cache = object.__new__(type("Cache", (), {}))
    assert split_sizes(cache, 100) == [64, 32, 4]  # asked once: powers of two
    assert split_sizes(cache, 100) == [100]  # the periodic size: one scan
    assert split_sizes(cache, 37) == [32, 4, 1]
    assert split_sizes(cache, 64) == [64]


def test_steps_per_execution_is_validated_and_replaceable(tmp_path):
    assert jaxspec.RunConfig().steps_per_execution == "auto"
    assert jaxspec.RunConfig().replace(steps_per_execution=1).steps_per_execution == 1
    for bad in (0, -3, 2.5, "fast"):
        with pytest.raises(ValueError):
            jaxspec.RunConfig(steps_per_execution=bad)


@pytest.mark.parametrize("steps", [None, 11])
def test_grouped_evaluate_equals_one_batch_per_run(tmp_path, monkeypatch, steps, caplog):
    x, y = _data(23 * BATCH + 5)  # a short last batch when steps is None
    results, lines, dispatched = {}, {}, []
    real = CompiledLoop.dispatch

    def counting(self, state, global_step, *args, **kwargs):
        dispatched.append(kwargs.get("block_steps") or int(np.shape(jax.tree.leaves(args)[0])[0]))
        return real(self, state, global_step, *args, **kwargs)

    monkeypatch.setattr(CompiledLoop, "dispatch", counting)
    for grouped in (True, False):
        est = _estimator(tmp_path / str(grouped), grouped)
        est.train(batches_input_fn(x, y, BATCH), steps=3)
        dispatched.clear()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="jaxspec"):
            results[grouped] = est.evaluate(batches_input_fn(x, y, BATCH), steps=steps)
        lines[grouped] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Evaluation [")]
        n = 24 if steps is None else steps
        # grouped: loops of 8, 8, then 16 asked for: the 7 full batches left, then the
        # short one (its own shape); 11 steps: 8, then 3; each one call of the block loop
        expected = ([8, 8, 7, 1] if steps is None else [8, 3]) if grouped else [1] * n
        assert dispatched == expected
    assert results[True].keys() == results[False].keys()
    for key, value in results[False].items():
        assert results[True][key] == pytest.approx(value, rel=1e-5), key
    assert lines[True] == lines[False]


KERNEL = "params/params/Dense_0/kernel"  # the first layer's kernel in a checkpoint


def _order(monkeypatch):
    """Records ("dispatch", first global step) and ("after_run", global step) in order."""
    events = []
    dispatch, after_run = CompiledLoop.dispatch, HookRunner.after_run

    def recording_dispatch(self, state, global_step, *args, **kwargs):
        events.append(("dispatch", int(global_step)))
        return dispatch(self, state, global_step, *args, **kwargs)

    def recording_after_run(self, values, *args, **kwargs):
        events.append(("after_run", int(self.session.global_step)))
        return after_run(self, values, *args, **kwargs)

    monkeypatch.setattr(CompiledLoop, "dispatch", recording_dispatch)
    monkeypatch.setattr(HookRunner, "after_run", recording_after_run)
    return events


class _EveryTen(jaxspec.SessionRunHook):
    """A user's hook that says its steps (10, 20, ...) and reads the state there."""

    def __init__(self):
        self.seen = []

    def next_required_step(self, global_step):
        return (global_step // 10 + 1) * 10

    def after_run(self, run_context, run_values):
        session = run_context.session
        self.seen.append((session.global_step, np.array(session.state.params["params"]["Dense_0"]["kernel"])))


def test_grouped_loops_are_dispatched_ahead_where_no_hook_reads_the_state(tmp_path, monkeypatch):
    """tf.estimator's default hooks (progress every 10 steps, a seconds saver): loop k+1
    is dispatched before loop k's after_run (the state goes to the loop ahead). With a
    user's hook that may read the state, loop k+1 is dispatched after it, and the hook
    reads the state of its step. Both train the hand loop's parameters."""
    x, y = _data(10 * BATCH)  # 10 batches: each call's input restarts where the hand loop's cycle does
    events = _order(monkeypatch)
    est = _estimator(tmp_path, True, log_step_count_steps=10, save_summary_steps=10)
    est.train(batches_input_fn(x, y, BATCH, repeat=True), steps=40)
    # loops end at TF's measured steps 1, 11, 21, 31: loop 2 runs as block calls of at most
    # the first call's bound (8 steps until a step time is measured; a loaded machine may
    # give fewer); every loop after the first is dispatched ahead
    second = [s for e, s in events if e == "dispatch" and 1 <= s < 11]
    assert second[0] == 1 and events[: len(second) + 1] == [("dispatch", s) for s in [0, *second]]
    assert events[len(second) + 1 :] == [
        *[e for s in (1, 11, 21) for e in (("after_run", s), ("dispatch", s + 10))],
        ("after_run", 31),
        ("after_run", 40),
    ]
    hand_at = _hand_params_at(x, y, [40, 41, 50, 51, 60, 61, 70])
    np.testing.assert_allclose(
        est.get_variable_value(KERNEL), hand_at[40]["params"]["Dense_0"]["kernel"], rtol=1e-4, atol=1e-5
    )
    events.clear()
    reader = _EveryTen()
    est.train(batches_input_fn(x, y, BATCH, repeat=True), hooks=[reader], steps=30)
    # loops end at the reader's steps (50, 60, 70) and at this call's measured ones (41, 51, 61)
    ends = [41, 50, 51, 60, 61, 70]
    assert events == [
        e for a, b in zip([40, *ends[:-1]], ends, strict=True) for e in (("dispatch", a), ("after_run", b))
    ]
    assert [s for s, _ in reader.seen] == ends  # its after_run runs after every loop
    for step, kernel in reader.seen:
        hand = hand_at[step]["params"]["Dense_0"]["kernel"]
        np.testing.assert_allclose(kernel, hand, rtol=1e-4, atol=1e-5, err_msg=str(step))


def test_a_seconds_saver_saves_the_state_of_its_step_with_loops_ahead(tmp_path, monkeypatch):
    """``save_checkpoints_secs=2`` on a clock that moves one second per reading: a save
    falls due when a loop ahead is about to be dispatched (that loop then waits for the
    save), so saves come at steps 11, 31 and 51 (loops end at TF's measured steps 1, 11,
    21, ...; and 0 and the final 60), each holding the
    hand loop's parameters of its step: no save read a state a loop ahead had taken."""
    ticks = iter(range(1, 1000))
    monkeypatch.setattr(timer, "time", types.SimpleNamespace(time=lambda: float(next(ticks))))
    x, y = _data()
    est = _estimator(
        tmp_path,
        True,
        log_step_count_steps=10,
        save_summary_steps=10,
        save_checkpoints_secs=2,
        keep_checkpoint_max=None,
    )
    est.train(batches_input_fn(x, y, BATCH, repeat=True), steps=60)
    store = CheckpointStore(str(tmp_path))
    assert sorted(store.all_steps()) == [0, 11, 31, 51, 60]
    hand_at = _hand_params_at(x, y, [11, 31, 51, 60])
    for step in (11, 31, 51, 60):
        kernel = store.read(step)[KERNEL]
        hand = hand_at[step]["params"]["Dense_0"]["kernel"]
        np.testing.assert_allclose(kernel, hand, rtol=1e-4, atol=1e-5, err_msg=str(step))


def test_a_sigterm_with_a_loop_ahead_saves_that_loops_step(tmp_path):
    """A SIGTERM at step 21 (sent by a LoggingTensorHook's formatter, which reads no
    state): the loop ahead (steps 22-31) already holds the state, so it is accounted for
    and step 31 is saved, with the hand loop's parameters; then SystemExit(143)."""

    sent = []

    def formatter(values):
        if int(values["gs"]) >= 20 and not sent:  # once: a second SIGTERM ends the process
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return "logged"

    x, y = _data()
    est = _estimator(tmp_path, True)
    hook = jaxspec.LoggingTensorHook({"gs": "global_step"}, every_n_iter=10, formatter=formatter)
    with pytest.raises(SystemExit) as exit_info:
        est.train(batches_input_fn(x, y, BATCH, repeat=True), hooks=[hook], steps=100)
    assert exit_info.value.code == 143
    store = CheckpointStore(str(tmp_path))
    assert store.latest_step() == 31  # logs at 1, 11, 21; the loop 21-31 was ahead
    hand = _hand_params(x, y, 31)["params"]["Dense_0"]["kernel"]
    np.testing.assert_allclose(store.read(31)[KERNEL], hand, rtol=1e-4, atol=1e-5)
