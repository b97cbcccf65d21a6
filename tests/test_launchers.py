"""Which cluster a process joins (RunConfig.cluster > TF_CONFIG > launcher > JAX_*), TF_CONFIG
as TFJobs and AI Platform write it (master, environment, ps), ClusterResolvers, the
opt-out and one-process launches. jax.distributed.initialize is replaced by a recorder
where a test checks what would be joined: this process's JAX is already running."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import warnings
from typing import Any

import jax
import pytest

import jaxspec
from jaxspec.config import cluster as cluster_mod
from jaxspec.config.cluster import (
    Cluster,
    describe_process,
    find_cluster,
    maybe_initialize,
    task_from_tf_config,
)
from jaxspec.config.launchers import detect_launch

_ENV_PREFIXES = ("SLURM_", "OMPI_", "PMIX_", "TPU_WORKER", "MEGASCALE_", "JAX_COORDINATOR", "JAX_NUM_PROC")
SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_NODELIST": "node[003-004]",
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
}
JAX_VARS = {"JAX_COORDINATOR_ADDRESS": "10.0.0.9:1234", "JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": "2"}
TFJOB = {"master": ["m0:2222"], "worker": ["w0:2222", "w1:2222"]}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No launcher, TF_CONFIG or JAX_* variable of the machine running the tests leaks in."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES) or name in (
            "TF_CONFIG",
            "JAX_PROCESS_ID",
            "KUBERNETES_SERVICE_HOST",
        ):
            monkeypatch.delenv(name)
    monkeypatch.setattr(cluster_mod, "_roles", [])
    monkeypatch.setattr(cluster_mod, "_this_process", 0)
    monkeypatch.setattr(cluster_mod, "_said_alone", False)


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The arguments of every jax.distributed.initialize call (none is made for real)."""
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> None:
        names = ("coordinator_address", "num_processes", "process_id")
        calls.append({**dict(zip(names, args, strict=False)), **kwargs})

    monkeypatch.setattr(jax.distributed, "initialize", record)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    return calls


def _set(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_detection_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """RunConfig's cluster, then TF_CONFIG, then the launcher's variables, then JAX_*."""
    _set(
        monkeypatch,
        {
            **SLURM,
            **JAX_VARS,
            "TF_CONFIG": json.dumps({"cluster": TFJOB, "task": {"type": "worker", "index": 1}}),
        },
    )
    given = Cluster("h:1", 5, 4)
    assert find_cluster(given) is given
    from_dict = find_cluster({"coordinator_address": "h:2", "num_processes": 6, "process_id": 5})
    assert (from_dict.coordinator_address, from_dict.num_processes, from_dict.process_id) == ("h:2", 6, 5)
    tf = find_cluster(None)  # TF_CONFIG: master first, then the workers
    assert (tf.coordinator_address, tf.num_processes, tf.process_id, tf.launch) == ("m0:2222", 3, 2, None)
    monkeypatch.delenv("TF_CONFIG")
    slurm = find_cluster(None)  # SLURM_* as srun sets them
    assert (slurm.launch.method, slurm.num_processes, slurm.process_id) == ("slurm", 4, 3)
    assert slurm.coordinator_address is None  # JAX's Slurm detector finds it when joining
    for name in SLURM:
        monkeypatch.delenv(name)
    jax_env = find_cluster(None)
    assert (
        jax_env.launch.method,
        jax_env.coordinator_address,
        jax_env.num_processes,
        jax_env.process_id,
    ) == (
        "jax_env",
        "10.0.0.9:1234",
        3,
        2,
    )
    for name in JAX_VARS:
        monkeypatch.delenv(name)
    assert find_cluster(None) is None and detect_launch() is None  # one process


def test_open_mpi_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables mpirun (Open MPI 4) gives each rank."""
    _set(
        monkeypatch,
        {
            "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1,10.148.0.1:34911",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        },
    )
    launch = detect_launch()
    assert (launch.method, launch.num_processes, launch.process_id, launch.launcher) == (
        "ompi",
        2,
        1,
        "Open MPI (mpirun)",
    )


@pytest.mark.parametrize(
    "variables, missing",
    [
        ({"JAX_NUM_PROCESSES": "2"}, "JAX_COORDINATOR_ADDRESS, JAX_PROCESS_ID"),
        ({"JAX_PROCESS_ID": "0", "JAX_COORDINATOR_ADDRESS": "h:1"}, "JAX_NUM_PROCESSES"),
    ],
)
def test_jax_variables_incomplete(monkeypatch: pytest.MonkeyPatch, variables: dict, missing: str) -> None:
    _set(monkeypatch, variables)
    with pytest.raises(ValueError, match=f"^{missing} must be set too"):
        find_cluster(None)


def test_jax_variables_out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {**JAX_VARS, "JAX_PROCESS_ID": "3"})
    with pytest.raises(ValueError, match="JAX_PROCESS_ID 3"):
        find_cluster(None)
    _set(monkeypatch, {"JAX_PROCESS_ID": "one"})
    with pytest.raises(ValueError, match="must be integers"):
        find_cluster(None)


def test_tfjob_master_is_the_chief(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubeflow TFJob / AI Platform TF_CONFIG: master 0 is process 0 and the chief;
    RunConfig says what tf_bridge's tf.estimator RunConfig says for the same TF_CONFIG."""
    from tf_bridge.runtime.cluster_settings import cluster_settings

    for kind, index, process in (("master", 0, 0), ("worker", 0, 1), ("worker", 1, 2)):
        tf_config = {"cluster": TFJOB, "task": {"type": kind, "index": index}, "environment": "cloud"}
        found = Cluster.from_tf_config(json.dumps(tf_config))
        assert (found.coordinator_address, found.num_processes, found.process_id) == ("m0:2222", 3, process)
        assert found.roles == ["master 0", "worker 0", "worker 1"]
    tf_config = {"cluster": TFJOB, "task": {"type": "master", "index": 0}, "environment": "cloud"}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert task_from_tf_config() == ("chief", 0)  # its role: trains, saving listeners, ...
    config = jaxspec.RunConfig()  # this process is JAX process 0, as master 0 is
    tf_side = cluster_settings(tf_config)
    assert (config.task_type, config.is_chief) == (tf_side.task_type, tf_side.is_chief) == ("master", True)


def test_tf_config_chief_and_master_refused() -> None:
    both = {"cluster": {**TFJOB, "chief": ["c:1"]}, "task": {"type": "worker", "index": 0}}
    with pytest.raises(ValueError, match="'chief' or a 'master' job, not both"):
        task_from_tf_config(json.dumps(both))
    two = {"cluster": {"master": ["a:1", "b:1"]}, "task": {"type": "master", "index": 0}}
    with pytest.raises(ValueError, match="one 'master' task, got 2"):
        task_from_tf_config(json.dumps(two))


@pytest.mark.parametrize("kind", ["worker", "ps"])
def test_ps_refused_before_anything_is_written(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, joins: list, kind: str
) -> None:
    """A cluster with parameter servers: ValueError naming 'ps' from train, before the
    model_dir is written or any process joins (it used to wait for a coordinator)."""
    from tests import multiprocess_worker as worker

    cluster = {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1", "p:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
    model_dir = tmp_path / "model"
    est = worker.make_estimator(str(model_dir), [])
    with pytest.raises(ValueError, match="'ps' job .*without 'ps' tasks"):
        est.train(worker.train_input_fn, steps=1)
    assert joins == [] and (not model_dir.exists() or list(model_dir.iterdir()) == [])


class _Resolver:
    """TF's ClusterResolver interface, without TensorFlow: a dict spec, sparse job."""

    def __init__(self, task_type: str | None, task_id: int | None) -> None:
        self.task_type, self.task_id = task_type, task_id

    def cluster_spec(self) -> dict:
        return {"chief": ["c:7"], "worker": {1: "w1:7", 0: "w0:7"}}

    def master(self) -> str:
        return ""


def test_cluster_resolver(joins: list) -> None:
    """TF's own SimpleClusterResolver (tf.train.ClusterSpec) and a plain duck-typed one."""
    tf = pytest.importorskip("tensorflow")
    spec = tf.train.ClusterSpec({"chief": ["c:7"], "worker": ["w0:7", "w1:7"]})
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="worker", task_id=1)
    config = jaxspec.RunConfig(cluster=resolver)  # RunConfig calls its master()
    assert config.master == resolver.master()
    for given in (resolver, _Resolver("worker", 1)):
        found = find_cluster(given)
        assert (found.coordinator_address, found.num_processes, found.process_id) == ("c:7", 3, 2)
        assert found.source == f"the ClusterResolver {type(given).__name__}"  # named in the INFO line
    maybe_initialize(_Resolver("worker", 0), heartbeat_timeout_secs=12)
    assert joins[0]["process_id"] == 1 and joins[0]["heartbeat_timeout_seconds"] == 12
    evaluator = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="evaluator", task_id=0)
    assert find_cluster(evaluator) is None and jaxspec.RunConfig(cluster=evaluator).task_type == "evaluator"
    tfjob = tf.train.ClusterSpec(TFJOB)
    master = tf.distribute.cluster_resolver.SimpleClusterResolver(tfjob, task_type="master", task_id=0)
    assert (find_cluster(master).process_id, jaxspec.RunConfig(cluster=master).task_type) == (0, "master")
    with pytest.raises(TypeError, match="RunConfig.cluster must be .*got object"):
        find_cluster(object())


def test_opt_out_and_already_joined(monkeypatch: pytest.MonkeyPatch, joins: list) -> None:
    """Cluster(num_processes=1) runs alone whatever the launcher says; a program that
    called jax.distributed.initialize itself is left as it is."""
    _set(monkeypatch, {**SLURM, **JAX_VARS})
    maybe_initialize(Cluster(num_processes=1))
    assert joins == [] and describe_process() == "process 0 (process 0 of 1)"
    maybe_initialize(None)  # the Slurm job of 4 tasks: joins
    assert [(c["num_processes"], c["process_id"], c["cluster_detection_method"]) for c in joins] == [
        (4, 3, "slurm")
    ]
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    maybe_initialize(None)
    Cluster("h:1", 2, 1).initialize()
    assert len(joins) == 1


def test_one_process_launch_joins_nothing(monkeypatch: pytest.MonkeyPatch, joins: list, caplog: Any) -> None:
    """``srun -n 1`` / ``mpirun -n 1``: one process runs alone, at once, with one INFO line
    (every Estimator asks again: the line is said once per process)."""
    _set(monkeypatch, {**SLURM, "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"})
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        maybe_initialize(None)
        maybe_initialize(None)
    assert joins == [] and describe_process() == "task 0 (process 0 of 1)"
    said = [m for m in caplog.messages if "started one process" in m]
    assert said == ["Slurm (srun) started one process: it runs alone, nothing to join."]


def test_heartbeat_and_info_line(joins: list, caplog: Any) -> None:
    """RunConfig.heartbeat_timeout_secs reaches jax.distributed.initialize (whole seconds,
    rounded up); the INFO line names the source, the process and the devices."""
    tf_config = {"cluster": TFJOB, "task": {"type": "worker", "index": 1}}
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        Cluster.from_tf_config(json.dumps(tf_config)).initialize(heartbeat_timeout_secs=7.5)
    assert joins[0]["heartbeat_timeout_seconds"] == 8 and joins[0]["cluster_detection_method"] is None
    # JAX is not really joined here: this process is JAX process 0 of 1
    assert (
        describe_process() == "master 0 (process 0 of 3)"
        and describe_process(2) == "worker 1 (process 2 of 3)"
    )
    n = jax.device_count()
    assert (
        f"Joined the cluster of TF_CONFIG as master 0 (process 0 of 3): {n} local devices, {n} in all."
        in caplog.messages
    )


def test_join_turns_jax_preemption_service_off(monkeypatch: pytest.MonkeyPatch, joins: list) -> None:
    """JAX's preemption notifier would take SIGTERM from the process (outside train it would
    be ignored): a join turns the service off, unless JAX_ENABLE_PREEMPTION_SERVICE is set."""
    before = jax.config.jax_enable_preemption_service
    seen = []
    monkeypatch.setattr(
        jax.distributed, "initialize", lambda *a, **k: seen.append(jax.config.jax_enable_preemption_service)
    )
    try:
        Cluster("h:1", 2, 1).initialize()
        jax.config.update("jax_enable_preemption_service", True)
        monkeypatch.setenv("JAX_ENABLE_PREEMPTION_SERVICE", "1")
        Cluster("h:1", 2, 1).initialize()
    finally:
        jax.config.update("jax_enable_preemption_service", before)
    assert seen == [False, True]


def test_estimator_passes_heartbeat(tmp_path: Any, joins: list) -> None:
    """TPUEstimator joins before its mesh with RunConfig's cluster and heartbeat."""
    from tests.helpers import init_fn, make_model_fn

    config = jaxspec.RunConfig(
        model_dir=str(tmp_path), heartbeat_timeout_secs=33, cluster=Cluster("h:9", 2, 1)
    )
    est = jaxspec.TPUEstimator(make_model_fn([]), config=config, train_batch_size=64, init_fn=init_fn)
    est._mesh()
    assert (joins[0]["coordinator_address"], joins[0]["heartbeat_timeout_seconds"]) == ("h:9", 33)


def test_joining_after_jax_started_says_what_to_do() -> None:
    """JAX refuses a join once its backend runs; the error names the source and the cures."""
    jax.devices()
    before = jax.config.jax_cpu_collectives_implementation
    try:
        with pytest.raises(RuntimeError, match="TF_CONFIG describes 3 processes.*maybe_initialize"):
            tf_config = {"cluster": TFJOB, "task": {"type": "worker", "index": 1}}
            Cluster.from_tf_config(json.dumps(tf_config)).initialize()
    finally:
        jax.config.update("jax_cpu_collectives_implementation", before)


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (apt-get install openmpi-bin)"
)
def test_mpirun_one_process_runs_alone(tmp_path: Any) -> None:
    """A real ``mpirun -n 1``: the process does not join (no coordinator to wait for), and
    says so once, however many Estimators ask."""
    code = (
        "import logging; logging.basicConfig(level=logging.INFO); "
        "import jax; from jaxspec.config.cluster import maybe_initialize, describe_process; "
        "maybe_initialize(None); maybe_initialize(None); "
        "print(jax.distributed.is_initialized(), jax.process_count(), describe_process())"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith(_ENV_PREFIXES)}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "1", sys.executable, "-c", code]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False 1 rank 0 (process 0 of 1)"
    assert done.stderr.count("started one process: it runs alone") == 1, done.stderr[-3000:]


def test_failing_detector_falls_through(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    """A launcher detector that fires but cannot read its job (a Kubernetes pod without
    the rights to read it) is skipped with a WARNING; the JAX_* variables still count."""
    from jax._src.clusters import SlurmCluster

    def broken(cls: Any) -> int:
        raise RuntimeError("no access")

    monkeypatch.setattr(SlurmCluster, "get_process_count", classmethod(broken))
    _set(monkeypatch, {**SLURM, **JAX_VARS})
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        launch = detect_launch()
    assert (launch.method, launch.num_processes, launch.process_id) == ("jax_env", 3, 2)
    assert any("Slurm (srun): its variables are set" in m and "no access" in m for m in caplog.messages)


def test_kubernetes_pod_without_the_kubernetes_package(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    """Every pod has KUBERNETES_SERVICE_HOST: a plain pod runs alone without JAX's warning
    about its Kubernetes extra; an indexed Job's pod that cannot be read says so."""
    pytest.importorskip("jax._src.clusters.k8s_cluster")
    if importlib.util.find_spec("kubernetes") is not None:
        pytest.skip("the kubernetes package is installed: JAX would ask the API server")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # JAX's UserWarning would raise here
        with caplog.at_level(logging.WARNING, logger="jaxspec"):
            assert detect_launch() is None
        assert caplog.messages == []
        monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
        with caplog.at_level(logging.WARNING, logger="jaxspec"):
            assert detect_launch() is None
    assert len(caplog.messages) == 1 and "pip install 'jax[k8s]'" in caplog.messages[0]
    _set(monkeypatch, JAX_VARS)  # the JAX_* variables of a JobSet's pod: no warning, they count
    caplog.clear()
    assert detect_launch().method == "jax_env" and caplog.messages == []
