"""A real one-node Slurm for the launcher tests: munged, slurmctld and slurmd of Debian's
``slurm-wlm`` and ``munge``, each with its own files in a temporary directory, its own
ports and munge socket (nothing of the machine's own Slurm, if any, is touched)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.two_processes import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def unavailable() -> str | None:
    """Why a real Slurm cannot start here (None: it can)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    return None


def _conf(root: Path, host: str) -> str:
    cpus = os.cpu_count() or 1
    return f"""ClusterName=jaxspectest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class SlurmCluster:
    """Start with ``start()``; ``env`` then points Slurm's commands at it; ``stop()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))

    def start(self, timeout: float = 60) -> None:
        """Start the three daemons and wait until the node is idle.

        Raises:
          RuntimeError: a daemon did not start or the node did not come up (the logs' tail).
        """
        r = self.root
        for sub in ("state", "spool"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "munge.key").write_bytes(os.urandom(1024))
        (r / "munge.key").chmod(0o600)
        (r / "slurm.conf").write_text(_conf(r, socket.gethostname()))
        munge = [f"--key-file={r}/munge.key", f"--log-file={r}/munged.log", f"--pid-file={r}/munged.pid"]
        self._run(["munged", "-f", "-S", str(r / "munge.socket"), *munge, f"--seed-file={r}/munged.seed"])
        self._run(["slurmctld", "-c"])
        self._run(["slurmd"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if state.stdout.strip() == "idle":
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Slurm's node did not come up:\n{self.logs()}")

    def _run(self, cmd: list[str]) -> None:
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"{cmd[0]} did not start: {done.stderr[-2000:]}\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                parts.append(f"{name}: {path.read_text()[-1500:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the daemons this object started (by their pid files)."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            try:
                os.kill(int(pid_file.read_text().strip()), 15)
            except (OSError, ValueError):
                pass
