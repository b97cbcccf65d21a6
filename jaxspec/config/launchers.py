"""Which launcher started this process, and where the process sits in the job it launched.

A process that is given no cluster (no ``RunConfig(cluster=...)``, no TF_CONFIG cluster)
looks here, in this order:

1. the launchers JAX itself knows (``jax.distributed.initialize()`` without arguments):
   Open MPI's ``mpirun``, Slurm's ``srun``, Cloud TPU VMs and GKE TPU slices, Kubernetes
   indexed Jobs. Each is JAX's own detector (its ``is_env_present``), asked in JAX's
   order; jaxspec only reads the count and index of processes from it;
2. ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` together
   (Kubeflow Trainer's JAX runtime, hand-written launch scripts).

Nothing found means one process, as before: nothing waits for anything.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from typing import Any

_log = logging.getLogger("jaxspec")

JAX_ENV = "jax_env"
_JAX_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")

# JAX's detector name -> (what users call the launcher, what it calls one process)
_LABELS = {
    "ompi": ("Open MPI (mpirun)", "rank"),
    "slurm": ("Slurm (srun)", "task"),
    "gcetpu": ("Cloud TPU VM", "TPU worker"),
    "gketpu": ("GKE TPU slice", "TPU worker"),
    "k8s": ("Kubernetes indexed Job", "completion index"),
    JAX_ENV: ("the JAX_* variables", "JAX_PROCESS_ID"),
}


@dataclasses.dataclass(frozen=True)
class Launch:
    """A launcher's description of this process.

    Attributes:
      method: JAX's name of the launcher's detector (its ``cluster_detection_method``:
        ``'ompi'``, ``'slurm'``, ``'gcetpu'``, ``'gketpu'``, ``'k8s'``), or ``'jax_env'``
        for the ``JAX_*`` variables.
      num_processes: processes in the job (int >= 1).
      process_id: this process's index, 0..num_processes-1.
      coordinator_address: ``host:port`` for ``'jax_env'``; None for a JAX detector,
        which finds it itself when the process joins.
    """

    method: str
    num_processes: int
    process_id: int
    coordinator_address: str | None = None

    @property
    def launcher(self) -> str:
        """The launcher's name as its users know it (``'Slurm (srun)'``...)."""
        return _LABELS.get(self.method, (self.method, "process"))[0]

    @property
    def task_word(self) -> str:
        """What the launcher calls one process (``'rank'``, ``'task'``...)."""
        return _LABELS.get(self.method, (self.method, "process"))[1]


def _jax_detectors() -> list[Any]:
    """JAX's cluster detectors in JAX's order, those that run without being asked for."""
    try:
        from jax._src import clusters  # JAX's detection; no public name lists its detectors
    except ImportError:  # pragma: no cover - a JAX without it: only the JAX_* variables
        return []
    return [env for env in clusters.ClusterEnv._cluster_types if not env.opt_in_only_method]


def _from_jax_detector() -> Launch | None:
    with warnings.catch_warnings(record=True) as said:  # JAX's hints: see below
        warnings.simplefilter("always")
        for env in _jax_detectors():
            try:
                if env.is_env_present():
                    return Launch(env.name, int(env.get_process_count()), int(env.get_process_id()))
            except Exception as error:  # a detector that fires but cannot say: the next one is asked
                _log.warning(
                    "%s: its variables are set but JAX could not read the job from them (%s); "
                    "looking further (JAX_* variables), else this process runs alone.",
                    _LABELS.get(env.name, (env.name,))[0],
                    error,
                )
    # Every Kubernetes pod has KUBERNETES_SERVICE_HOST, and JAX warns there when its
    # Kubernetes extra is missing; that matters only in an indexed Job's pod.
    if said and "JOB_COMPLETION_INDEX" in os.environ and _from_jax_variables() is None:
        _log.warning(
            "This pod belongs to an indexed Kubernetes Job, but JAX cannot read the Job without "
            "the kubernetes package (pip install 'jax[k8s]'), and no JAX_* variables are set: "
            "this process runs alone."
        )
    return None


def _from_jax_variables() -> Launch | None:
    values = {name: os.environ.get(name) for name in _JAX_VARIABLES}
    if values["JAX_NUM_PROCESSES"] is None and values["JAX_PROCESS_ID"] is None:
        return None  # JAX_COORDINATOR_ADDRESS alone is JAX's own (it reads it when joining)
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise ValueError(
            f"{', '.join(missing)} must be set too: the JAX_* variables describe a cluster together."
        )
    try:
        count, index = int(values["JAX_NUM_PROCESSES"] or ""), int(values["JAX_PROCESS_ID"] or "")
    except ValueError:
        raise ValueError(
            f"JAX_NUM_PROCESSES and JAX_PROCESS_ID must be integers, got "
            f"{values['JAX_NUM_PROCESSES']!r} and {values['JAX_PROCESS_ID']!r}."
        ) from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"JAX_PROCESS_ID {index} is not in 0..JAX_NUM_PROCESSES-1 ({count}).")
    return Launch(JAX_ENV, count, index, values["JAX_COORDINATOR_ADDRESS"])


def detect_launch() -> Launch | None:
    """This process's launch, found in the environment in the order of the module's
    docstring; None when nothing describes one (one process).

    Raises:
      ValueError: some but not all of ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/
        ``JAX_PROCESS_ID`` set (naming the missing ones), non-integers, or an id outside
        0..count-1.
    """
    return _from_jax_detector() or _from_jax_variables()
