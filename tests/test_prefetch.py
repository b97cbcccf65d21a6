"""Input read ahead in a background thread: exact order, input_fn's exceptions with their
own type, and no thread left running after the call however it ends."""

from __future__ import annotations

import os
import signal
import threading

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.loop.prefetch import THREAD_NAME, GroupPrefetcher


class InputBroke(Exception):
    """A user's own exception type."""


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def make_input_fn(n_batches: int | None, fail_at: int | None = None):
    def input_fn():
        i = 0
        while n_batches is None or i < n_batches:
            if i == fail_at:
                raise InputBroke(f"batch {i} could not be read")
            x = np.full((4, 2), float(i), np.float32)
            yield {"x": x, "id": np.full((4,), i, np.int32)}, np.zeros(4, np.float32)
            i += 1

    return input_fn


def make_estimator(tmp_path, seen: list[int], iterations_per_loop: int = 3) -> jaxspec.TPUEstimator:
    def model_fn(features, labels, mode, params, state):
        if mode == jaxspec.ModeKeys.PREDICT:
            return jaxspec.TPUEstimatorSpec(mode, predictions={"id": features["id"]})
        loss = jnp.mean((features["x"].sum(-1) * state["w"] - labels) ** 2)
        host = (lambda ids: seen.append(int(ids[0])), [features["id"]])
        if mode == jaxspec.ModeKeys.EVAL:
            return jaxspec.TPUEstimatorSpec(mode, loss=loss, host_call=host)
        new = {"w": state["w"] - 0.01}
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=new, host_call=host)

    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        log_step_count_steps=None,
        save_summary_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=iterations_per_loop),
    )
    return jaxspec.TPUEstimator(
        model_fn,
        config=config,
        use_tpu=False,
        train_batch_size=4,
        eval_batch_size=4,
        predict_batch_size=4,
        init_fn=lambda: {"w": jnp.ones((), jnp.float32)},
    )


def test_steps_see_batches_in_input_order(tmp_path):
    seen: list[int] = []
    est = make_estimator(tmp_path, seen)
    est.train(make_input_fn(None), steps=10)  # loops of 3, 3, 3, 1
    assert seen == list(range(10))
    seen.clear()
    est.evaluate(make_input_fn(8))
    assert seen == list(range(8))
    ids = [p["id"] for p in est.predict(make_input_fn(7))]
    assert ids == [i for i in range(7) for _ in range(4)]
    assert prefetch_threads() == []


@pytest.mark.parametrize("fail_at", [0, 1, 5])
def test_input_exception_keeps_its_type(tmp_path, fail_at):
    seen: list[int] = []
    est = make_estimator(tmp_path, seen)
    with pytest.raises(InputBroke, match=f"batch {fail_at}"):
        est.train(make_input_fn(None, fail_at=fail_at), steps=9)
    assert prefetch_threads() == []
    assert seen == list(range(3 * (fail_at // 3)))  # the loops before the one that failed ran
    with pytest.raises(InputBroke):
        est.evaluate(make_input_fn(None, fail_at=fail_at + 1))
    assert prefetch_threads() == []


class StopAt(jaxspec.SessionRunHook):
    def __init__(self, step: int, sigterm: bool = False) -> None:
        self.step, self.sigterm = step, sigterm

    def after_run(self, run_context, run_values):
        if int(run_context.session.global_step) >= self.step:
            if self.sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                run_context.request_stop()


def test_early_stop_and_sigterm_leave_no_thread(tmp_path):
    seen: list[int] = []
    est = make_estimator(tmp_path, seen)
    est.train(make_input_fn(None), steps=30, hooks=[StopAt(3)])
    assert prefetch_threads() == [] and seen == [0, 1, 2]
    with pytest.raises(SystemExit) as exit_info:
        est.train(make_input_fn(None), steps=30, hooks=[StopAt(6, sigterm=True)])
    assert exit_info.value.code == 143  # the status of a process ended by SIGTERM
    assert prefetch_threads() == []
    assert est.latest_checkpoint().endswith("/6")


def test_predict_generator_closed_early(tmp_path):
    est = make_estimator(tmp_path, [])
    predictions = est.predict(make_input_fn(None))
    # The first loop's input is read in the caller's thread; the input thread starts when
    # the second loop's is asked for (loops of 3 steps of 4 rows: prediction 13).
    read = [next(predictions)["id"] for _ in range(12)]
    assert read == [i for i in range(3) for _ in range(4)] and prefetch_threads() == []
    assert next(predictions)["id"] == 3 and len(prefetch_threads()) == 1
    predictions.close()
    assert prefetch_threads() == []


_OPEN_AT_EXIT = """
import os, sys, threading
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax.numpy as jnp, numpy as np
import jaxspec
x = np.arange(160, dtype=np.float32).reshape(40, 4)
def model_fn(features, labels, mode, params, state):
    return jaxspec.TPUEstimatorSpec(mode, predictions={"p": features["x"] @ state["w"]})
def input_fn(params):
    return ({"x": x[s : s + 8]} for s in range(0, 40, 8))
est = jaxspec.TPUEstimator(
    model_fn, config=jaxspec.RunConfig(model_dir=sys.argv[1], tpu_config=jaxspec.TPUConfig(iterations_per_loop=2)),
    train_batch_size=8, predict_batch_size=8, params={}, init_fn=lambda: {"w": jnp.ones(4)},
)
predictions = est.predict(input_fn)
print([float(next(predictions)["p"]) for _ in range(20)])  # the input thread reads loop 3
"""


def test_predict_generator_left_open_at_exit(tmp_path):
    """A predict generator still open when the interpreter exits is closed first (its
    input thread stopped), with nothing printed: closed by the garbage collector after
    the modules' teardown, it printed 'Exception ignored' tracebacks."""
    import subprocess
    import sys

    script = tmp_path / "open_at_exit.py"
    script.write_text(_OPEN_AT_EXIT)
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert eval(run.stdout.strip().splitlines()[-1]) == [float(4 * 4 * i + 6) for i in range(20)]
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_prefetcher_reads_the_asked_sizes_in_order():
    steps = iter(range(10))
    asked: list[int] = []

    def next_group(n: int):
        asked.append(n)
        got = [s for _, s in zip(range(n), steps, strict=False)]
        return (got, None, len(got)) if got else None

    prefetcher = GroupPrefetcher(next_group, lambda done: min(4, 10 - done), depth=1)
    groups = [prefetcher.get(4), prefetcher.get(4), prefetcher.get(2)]
    assert [g[0] for g in groups] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert prefetcher.get(0) is None
    prefetcher.close()
    assert asked == [4, 4, 2]
