"""Two processes x 4 CPU devices started by a launcher, not TF_CONFIG, train as one
process of 8 devices: Open MPI's real ``mpirun``; a real one-node Slurm's ``srun``; the
variables ``srun`` sets (for machines without Slurm); the ``JAX_*`` variables. Each run shares one model_dir; the final variables equal a
one-process 8-device run's (1e-5)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests import launcher_worker, slurm_cluster
from tests import multiprocess_worker as worker
from tests.two_processes import free_port

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CLUSTER_VARIABLES = (
    "TF_CONFIG",
    "XLA_FLAGS",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
)


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLUSTER_VARIABLES}
    env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env["PYTHONPATH"] = ROOT
    return env


def _results(out_dir: str) -> list[dict]:
    files = sorted(glob.glob(os.path.join(out_dir, "process_*.json")))
    results = []
    for path in files:
        with open(path) as f:
            results.append(json.load(f))
    return results


def _wait(procs: list[subprocess.Popen], timeout: int = 420) -> str:
    logs = []
    for proc in procs:
        log, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, log[-4000:]
        logs.append(log)
    return "\n".join(logs)


def _start(env: dict[str, str], cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: Any) -> dict[str, np.ndarray]:
    """The final variables of one process of 8 devices (this one)."""
    est = worker.make_estimator(str(tmp_path_factory.mktemp("one")), [])
    est.train(worker.train_input_fn, steps=launcher_worker.STEPS)
    return est._checkpoint_store().read()


def _check(out_dir: str, log: str, reference: dict[str, np.ndarray], launcher: str, role: str) -> None:
    """Both processes saw 2 processes and 8 devices, named themselves ``role`` i (or the
    two names ``role`` lists, comma-separated) and ended with the reference's variables."""
    roles = role.split(", ") if ", " in role else [f"{role} 0", f"{role} 1"]
    results = _results(out_dir)
    assert [r["process"] for r in results] == [0, 1]
    for r in results:
        assert (r["processes"], r["devices"], r["local_devices"]) == (2, 8, 4)
        assert r["described"] == f"{roles[r['process']]} (process {r['process']} of 2)"
        for name, value in reference.items():
            np.testing.assert_allclose(r["params"][name], value, atol=1e-5, err_msg=name)
    for i in (0, 1):  # one INFO line per process names the launcher, the process, the devices
        line = (
            f"Joined the cluster of {launcher} as {roles[i]} (process {i} of 2): 4 local devices, 8 in all."
        )
        assert log.count(line) == 1, log[-4000:]


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (apt-get install openmpi-bin)"
)
def test_mpirun_two_processes(tmp_path: Any, reference: dict[str, np.ndarray]) -> None:
    """Open MPI's real ``mpirun -n 2`` (root needs --allow-run-as-root; --oversubscribe
    for 2 slots on a small machine); JAX_COORDINATOR_PORT picks a free port instead of
    the one JAX derives from the job id."""
    env = dict(_base_env(), JAX_COORDINATOR_PORT=str(free_port()))
    mpi = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2"]
    log = _wait([_start(env, [*mpi, sys.executable, SCRIPT, str(tmp_path / "model"), str(tmp_path)])])
    _check(str(tmp_path), log, reference, "Open MPI (mpirun)", "rank")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: Any) -> Any:
    """A real one-node Slurm (tests/slurm_cluster.py), stopped after the module."""
    why = slurm_cluster.unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as error:  # installed, but this machine cannot run its daemons
        pytest.skip(f"Slurm's daemons did not start here: {error}")
    yield cluster
    cluster.stop()


def test_srun_two_processes(tmp_path: Any, reference: dict[str, np.ndarray], slurm: Any) -> None:
    """A real ``srun -n 2`` on a one-node Slurm started here (skipped without slurm-wlm,
    munge or root); JAX_COORDINATOR_PORT picks a free port instead of the job id's."""
    env = dict(_base_env(), SLURM_CONF=slurm.env["SLURM_CONF"], JAX_COORDINATOR_PORT=str(free_port()))
    cmd = ["srun", "-n", "2", "--overcommit", sys.executable, SCRIPT, str(tmp_path / "model"), str(tmp_path)]
    _check(str(tmp_path), _wait([_start(env, cmd)]), reference, "Slurm (srun)", "task")


def test_slurm_variables_two_processes(tmp_path: Any, reference: dict[str, np.ndarray]) -> None:
    """Not a real Slurm: each process gets the variables ``srun -n 2`` sets on one node
    and JAX's Slurm detector reads (SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS,
    SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_NODES), as JAX's own tests do."""
    common = dict(
        _base_env(),
        SLURM_JOB_ID="4242",
        SLURM_STEP_NODELIST="127.0.0.1",
        SLURM_STEP_NUM_NODES="1",
        SLURM_NTASKS="2",
        JAX_COORDINATOR_PORT=str(free_port()),
    )
    cmd = [sys.executable, SCRIPT, str(tmp_path / "model"), str(tmp_path)]
    procs = [_start(dict(common, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)), cmd) for i in (0, 1)]
    _check(str(tmp_path), _wait(procs), reference, "Slurm (srun)", "task")


def test_jax_variables_two_processes(tmp_path: Any, reference: dict[str, np.ndarray]) -> None:
    """JAX_COORDINATOR_ADDRESS + JAX_NUM_PROCESSES + JAX_PROCESS_ID (Kubeflow Trainer's
    JAX runtime sets these)."""
    common = dict(_base_env(), JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}", JAX_NUM_PROCESSES="2")
    cmd = [sys.executable, SCRIPT, str(tmp_path / "model"), str(tmp_path)]
    procs = [_start(dict(common, JAX_PROCESS_ID=str(i)), cmd) for i in (0, 1)]
    _check(str(tmp_path), _wait(procs), reference, "the JAX_* variables", "JAX_PROCESS_ID")


def test_tfjob_master_and_worker(tmp_path: Any, reference: dict[str, np.ndarray]) -> None:
    """TF_CONFIG as a Kubeflow TFJob writes it (``master`` + ``worker``, environment
    ``cloud``): the master is process 0 (it used to raise ValueError)."""
    cluster = {"master": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    cmd = [sys.executable, SCRIPT, str(tmp_path / "model"), str(tmp_path)]
    procs = []
    for kind in ("master", "worker"):
        tf_config = {"cluster": cluster, "task": {"type": kind, "index": 0}, "environment": "cloud"}
        procs.append(_start(dict(_base_env(), TF_CONFIG=json.dumps(tf_config)), cmd))
    _check(str(tmp_path), _wait(procs), reference, "TF_CONFIG", "master 0, worker 0")
