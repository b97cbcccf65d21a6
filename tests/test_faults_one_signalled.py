"""A preemption signal to ONE process of a two-process run (issue 45: schedulers often
signal one host first): both processes agree on one stop step, save that checkpoint
together and both exit 143; resuming from it equals an uninterrupted run."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

from jaxspec.loop.preemption_agreement import _decide
from tests import faults_worker as job
from tests.two_processes import start_two_processes

SCRIPT = os.path.join(os.path.dirname(__file__), "faults_worker.py")
HEARTBEAT = 10  # no peer is lost here; a short bound only keeps a broken run from hanging the test


def _wait_for_step(proc, step: int) -> list[str]:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("at step ") and int(line.split()[2]) >= step:
            return seen
    raise AssertionError("".join(seen)[-4000:])


def _signal_one(tmp_path, victim: int, signum: int) -> tuple[list[int | None], list[str], float]:
    """Train both processes (no end in sight), send ``signum`` to process ``victim`` once
    it reports step 12; returns both exit statuses, both outputs and the seconds from the
    signal to the last exit."""
    model_dir = str(tmp_path / "run")
    name = signal.Signals(signum).name
    procs = start_two_processes(
        lambda kind: [SCRIPT, model_dir, str(tmp_path / f"{kind}.json"), "100000", str(HEARTBEAT), name]
    )
    try:
        head = _wait_for_step(procs[victim], 12)
        procs[victim].send_signal(signum)
        signalled = time.perf_counter()
        outs = [p.communicate(timeout=120)[0] for p in procs]
        waited = time.perf_counter() - signalled
    finally:
        for p in procs:
            p.kill()
            p.wait()
    outs[victim] = "".join(head) + outs[victim]
    return [p.returncode for p in procs], outs, waited


@pytest.mark.parametrize(("victim", "signum"), [(1, signal.SIGTERM), (0, signal.SIGUSR1)])
def test_a_signal_to_one_process_stops_both_at_one_step_and_the_resumed_run_is_exact(
    tmp_path, victim, signum
):
    statuses, logs, waited = _signal_one(tmp_path, victim, signum)
    name = signal.Signals(signum).name
    print(
        f"{name} to process {victim} only -> statuses {statuses}, last exit {waited:.2f} s after the signal"
    )
    both = "\n----\n".join(log[-3000:] for log in logs)
    assert statuses == [143, 143], both
    signalled, other = logs[victim], logs[1 - victim]
    assert f"{name} received: all processes stop at the next loop boundary" in signalled, both
    stopped = int(
        re.search(rf"Training stopped by {name} at global step (\d+); checkpoint saved", signalled)[1]
    )
    # the process not signalled names who was, and stops at the same step
    role = "chief 0 (process 0 of 2)" if victim == 0 else "worker 0 (process 1 of 2)"
    with_peer = re.search(
        rf"Training stopped at global step (\d+) with {re.escape(role)}, which received {name}", other
    )
    assert with_peer is not None and int(with_peer[1]) == stopped, both
    assert f"{role} received {name}: all processes stop at global step {stopped}" in other, both
    for log in logs:
        assert "finished" not in log and "ERROR:" not in log, both
        print("\n".join(line for line in log.splitlines() if line.startswith("WARNING:jaxspec")))
    after = int(re.search(r"Steps run after the signal: (\d+)", signalled)[1])
    assert stopped >= 12 and after <= 1, both  # one-step loops: the next boundary
    assert waited < 60, both  # generous: two interpreters' exits on a loaded 2-core machine

    # one checkpoint at the agreed step, whole (written by both processes together)
    from jaxspec.store.checkpoints import CheckpointStore

    model_dir = str(tmp_path / "run")
    store = CheckpointStore(model_dir, None, 10000.0)
    assert store.latest_step() == stopped
    assert store.damage(stopped) is None

    # resume here (one process, 8 devices) to 20 steps further: the uninterrupted run's values
    est = job.estimator(model_dir, HEARTBEAT)
    est.train(job.input_fn, max_steps=stopped + 20)
    hand = job.hand_params(stopped + 20)
    assert est.get_variable_value("global_step") == stopped + 20
    np.testing.assert_allclose(est.get_variable_value("w"), hand["w"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(est.get_variable_value("b"), hand["b"], rtol=1e-5, atol=1e-5)


def test_the_agreement_stops_at_the_first_signalled_process_and_refuses_different_steps():
    go = [("jaxspec/preemption/1/0/0", "40 -"), ("jaxspec/preemption/1/0/1", "40 -")]
    assert _decide(go, 2, 40) is None
    some = [("p/0", "40 -"), ("p/2", "40 SIGTERM"), ("p/1", "40 SIGUSR1")]
    assert _decide(some, 3, 40) == (1, "SIGUSR1")
    with pytest.raises(RuntimeError, match=r"different loop boundaries .*\{0: 40, 1: 41\}"):
        _decide([("p/0", "40 -"), ("p/1", "41 -")], 2, 40)
    with pytest.raises(RuntimeError, match=r"answers from processes \[0\], expected all 2"):
        _decide([("p/0", "40 -")], 2, 40)


def test_a_signal_after_the_stop_was_saved_exits_143_and_handlers_come_back():
    """Between the end of the watched block (the stop's checkpoint complete) and the exit,
    a further listed signal exits with 143 (SystemExit), as the stop would, rather than by
    the signal's default action (-15 / -10); the program's handlers come back either way."""
    from jaxspec.loop.preemption import EXIT_STATUS, PreemptionWatcher

    before = signal.getsignal(signal.SIGUSR1)
    with PreemptionWatcher(lambda: 3, (signal.SIGUSR1,)) as watcher:
        os.kill(os.getpid(), signal.SIGUSR1)
        watcher.reached_last_boundary()
    assert signal.getsignal(signal.SIGUSR1) is not before  # kept through the tidy-up
    with pytest.raises(SystemExit) as ended:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(1)  # the handler runs in this thread at the next bytecode
    assert ended.value.code == EXIT_STATUS == 143
    assert signal.getsignal(signal.SIGUSR1) is before

    with PreemptionWatcher(lambda: 3, (signal.SIGUSR1,)) as watcher:
        os.kill(os.getpid(), signal.SIGUSR1)
        watcher.reached_last_boundary()
    with pytest.raises(SystemExit) as ended:
        watcher.exit_if_triggered(5)
    assert ended.value.code == 143 and signal.getsignal(signal.SIGUSR1) is before

    with PreemptionWatcher(lambda: 3, (signal.SIGUSR1,)):
        pass  # no signal: restored at the block's end
    assert signal.getsignal(signal.SIGUSR1) is before


JOINED = """
import os, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
sys.path.insert(0, {root!r})
from jaxspec.config.cluster import maybe_initialize
maybe_initialize(None)
print("joined", flush=True)
time.sleep(20)
print("survived", flush=True)
"""


def test_a_sigterm_outside_train_ends_a_joined_process():
    """After jaxspec joins a cluster, a SIGTERM outside train (here: none runs) keeps its own
    action, as in one process: JAX's preemption notifier (a C++ SIGTERM handler that would
    swallow it) is off."""
    code = JOINED.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = start_two_processes(lambda kind: ["-c", code])
    try:
        head = []
        for line in procs[1].stdout:
            head.append(line)
            if line.startswith("joined"):
                break
        procs[1].send_signal(signal.SIGTERM)
        out = "".join(head) + procs[1].communicate(timeout=30)[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert procs[1].returncode == -signal.SIGTERM, out[-3000:]
    assert "survived" not in out


class _FakeService:
    """The part of JAX's coordination service an agreement uses, for threads of one
    process standing for processes: a key-value store and a reusable barrier."""

    def __init__(self, processes: int) -> None:
        self.kv: dict[str, str] = {}
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(processes)

    def key_value_set(self, key: str, value: str) -> None:
        with self.lock:
            assert key not in self.kv, key  # each process publishes once a round
            self.kv[key] = value

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None:
        self.barrier.wait(timeout=30)

    def key_value_dir_get(self, prefix: str) -> list[tuple[str, str]]:
        with self.lock:
            return sorted((k, v) for k, v in self.kv.items() if k.startswith(prefix))

    def key_value_delete(self, prefix: str) -> None:
        with self.lock:
            for key in [k for k in self.kv if k.startswith(prefix)]:
                del self.kv[key]


@pytest.mark.parametrize("signalled_at", [{1: 30}, {0: 20, 1: 20}, {0: 40, 1: 20}])
def test_watchers_of_several_processes_stop_at_the_first_boundary_any_was_signalled(signalled_at):
    """Three processes (threads on a fake service), boundaries every 10 steps, a signal
    to some of them before given boundaries: every watcher stops at the first of those
    boundaries, the ones not signalled name the lowest signalled process, and all exit 143."""
    from jaxspec.loop.preemption import PreemptionWatcher
    from jaxspec.loop.preemption_agreement import StopAgreement

    service = _FakeService(3)
    watchers = [PreemptionWatcher(None, ()) for _ in range(3)]
    for i, w in enumerate(watchers):
        w._agreement = StopAgreement(service, 3, i, call=1)
    stops: dict[int, int] = {}

    def run(i: int) -> None:
        for step in range(10, 100, 10):
            if signalled_at.get(i) == step:
                watchers[i]._handle(signal.SIGTERM, None)
            if watchers[i].stop_here(step):
                stops[i] = step
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    first = min(signalled_at.values())
    assert stops == {0: first, 1: first, 2: first}
    lowest = min(i for i, step in signalled_at.items() if step == first)
    for i, w in enumerate(watchers):
        if i in signalled_at and signalled_at[i] == first:
            assert w.signum == signal.SIGTERM and w.stopped_with is None
        else:
            assert w.stopped_with == (lowest, "SIGTERM")
        with pytest.raises(SystemExit) as ended:
            w.exit_if_triggered(first)
        assert ended.value.code == 143
    assert len(service.kv) == 3  # only the last round's answers are left


def test_a_signal_after_the_last_agreed_boundary_does_not_end_its_process_alone(caplog):
    """Training reached its end with no signal agreed; one process is signalled during the
    final save: both return, so a collective the program runs after train (a fresh user's
    variable read) is not left waiting for a process that ended alone."""
    from jaxspec.loop.preemption import PreemptionWatcher
    from jaxspec.loop.preemption_agreement import StopAgreement

    service = _FakeService(2)
    watchers = [PreemptionWatcher(None, ()) for _ in range(2)]
    for i, w in enumerate(watchers):
        w._agreement = StopAgreement(service, 2, i, call=1)
    threads = [threading.Thread(target=lambda w=w: [w.stop_here(s) for s in (10, 20)]) for w in watchers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(w.triggered for w in watchers)
    for w in watchers:
        w.reached_last_boundary()
    watchers[1]._handle(signal.SIGTERM, None)  # during the final save
    watchers[0].exit_if_triggered(20)  # returns: no stop for this one
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        watchers[1].exit_if_triggered(20)  # returns too, saying why
    assert watchers[1].signum == signal.SIGTERM
    assert "SIGTERM received after training's last step (global step 20; checkpoint saved)" in caplog.text
    assert "Signal every process" in caplog.text
