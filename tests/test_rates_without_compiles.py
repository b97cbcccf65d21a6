"""Rates without compiles (issue 46, item 2): ``global_step/sec``, ``examples/sec`` and
``perf/mfu`` leave out the seconds spent compiling, as TF's StepCounterHook never timed
graph construction. Read back from the event files: on a train whose loop compiles a
new batch shape mid-run (a model_fn that takes 2 s to trace), no interval reads the compile; on
a clock of our own, the interval is exactly the wall time less the compile seconds; and
the CompileClock counts what jax.monitoring reports of XLA compiles on its thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import digits, fast_config, init_fn, make_model_fn, no_compilation_cache
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import jaxspec
from jaxspec.hooks import timer
from jaxspec.hooks.estimator_hooks import ProgressHook
from jaxspec.loop_cost import BACKEND_COMPILE_EVENT, CompileClock, LoopCost
from jaxspec.spec.hooks import NEVER

X, Y = digits(160)
TRACE_SECS = 2.0  # each trace of model_fn (each new loop) takes this long


def _scalars(logdir: str, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(logdir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


class _StepTimes(jaxspec.SessionRunHook):
    """When (``time.perf_counter``) each run's results reached the hooks; it needs no
    step of its own, so steps stay grouped."""

    def next_required_step(self, global_step: int) -> int:
        return NEVER

    def reads_state_after(self, step: int) -> bool:
        return False

    def may_stop_after(self, step: int) -> bool:
        return False

    def __init__(self) -> None:
        self.times: list[tuple[int, float]] = []

    def before_run(self, run_context: Any) -> Any:
        return jaxspec.SessionRunArgs("global_step")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.times.append((int(run_values.results), time.perf_counter()))


def test_a_compile_mid_run_is_in_no_rate(tmp_path: Any) -> None:
    inner, traced = make_model_fn(as_estimator_spec=True), []

    def slow_model_fn(features, labels, mode, params, state, global_step):
        time.sleep(TRACE_SECS)  # a model that takes long to compile
        traced.append(time.perf_counter())
        return inner(features, labels, mode, params, state, global_step)

    model_dir = str(tmp_path / "m")
    config = fast_config(
        model_dir, steps_per_execution="auto", log_step_count_steps=10, save_summary_steps=10
    )
    est = jaxspec.Estimator(slow_model_fn, config=config, init_fn=init_fn, params={})
    times = _StepTimes()

    def input_fn():  # 16 rows a batch, then 8 from step 25: a new shape, compiled mid-run
        for i in range(60):
            rows = slice((i % 10) * 16, (i % 10) * 16 + (16 if i < 25 else 8))
            yield {"x": X[rows]}, Y[rows]

    est.train(input_fn, hooks=[times], steps=60)
    rates = _scalars(model_dir, "global_step/sec")
    assert [s for s, _ in rates] == [11, 21, 31, 41, 51]
    # a compile (the loop for the new batch shape) happened inside a measured interval ...
    reached = dict(times.times)
    assert any(reached[1] < t < reached[51] for t in traced), (traced, reached)
    # ... and no interval holds its seconds: each of 10 steps took far less than a trace
    for _, rate in rates:
        assert 10 / rate < TRACE_SECS / 2, rates
    examples = dict(_scalars(model_dir, "examples/sec"))
    for step, rate in rates:
        assert examples[step] == pytest.approx(16 * rate, rel=1e-5)


def test_the_interval_is_wall_time_less_compile_seconds(tmp_path: Any, monkeypatch: Any) -> None:
    """On a clock of our own: 6 s between measured steps, 5 of them compiling -> 10
    steps in 1 s; then 2 s without a compile -> 5 steps/s; perf/mfu from the same rate."""
    now = [1000.0]
    monkeypatch.setattr(timer.time, "time", lambda: now[0])
    lines: list[str] = []
    hook = ProgressHook(str(tmp_path), 10, 10, 8, lambda msg, *a, **k: lines.append(msg % a), peak_flops=1e6)
    hook.after_create_session(type("S", (), {"global_step": 0})(), None)
    hook.after_compile(LoopCost(10, 2e4, None, None, None, None, 1, "cpu", "cpu"), 1)
    hook.after_loop(0, np.ones(1))  # step 1: the clock starts
    now[0] += 6.0
    hook.leave_out(5.0)
    hook.after_loop(1, np.ones(10))  # step 11
    now[0] += 2.0
    hook.after_loop(11, np.ones(10))  # step 21
    from jaxspec.store import summaries

    summaries.close_all()
    assert _scalars(str(tmp_path), "global_step/sec") == [(11, 10.0), (21, 5.0)]
    assert _scalars(str(tmp_path), "examples/sec") == [(11, 80.0), (21, 40.0)]
    assert [(s, pytest.approx(v)) for s, v in _scalars(str(tmp_path), "perf/mfu")] == [(11, 0.2), (21, 0.1)]
    assert "loss = 1, step = 10 (1.000 sec)" in lines and "global_step/sec: 5" in lines


@no_compilation_cache()  # every compile below is XLA's own, none read back from the cache
def test_the_compile_clock_counts_what_jax_monitoring_reports() -> None:
    heard: list[float] = []

    def listener(event: str, duration: float, **_: Any) -> None:
        if event == BACKEND_COMPILE_EVENT and threading.get_ident() == main:
            heard.append(duration)

    main = threading.get_ident()
    jax.monitoring.register_event_duration_secs_listener(listener)
    clock, told = CompileClock(), []
    clock.listeners.append(told.append)
    try:
        jnp.arange(37.0).reshape(37, 1) * 3.5  # eager ops on a new shape: XLA compiles
        other = threading.Thread(target=lambda: jax.jit(lambda x: x - 1)(jnp.ones(41)))
        other.start()
        other.join()  # another thread's compile is not this call's
        with clock.timing():  # a timed section: XLA's compiles inside are part of it
            time.sleep(0.05)
            jax.jit(lambda x: x * 2 + 1)(jnp.ones(43))
    finally:
        clock.stop()
        jax.monitoring.unregister_event_duration_listener(listener)
    jax.jit(lambda x: x / 3)(jnp.ones(47))  # after stop(): not counted
    assert len(heard) >= 3 and len(told) >= 2
    eager = sum(told[:-1])  # the compiles heard before the timed section
    assert eager == pytest.approx(sum(heard[: len(told) - 1]))
    assert told[-1] >= 0.05 + heard[len(told) - 1]  # the section holds its compile
    assert clock.total == pytest.approx(sum(told))
