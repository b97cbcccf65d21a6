"""Test setup: 8 virtual CPU devices (before JAX is imported) and the repo on sys.path."""

import os
import shutil
import sys
import tempfile

import pytest

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The persistent XLA cache is on in tests, as it is for users by default, in one fresh
# directory per run that every xdist worker shares (pytest_configure below): a program one
# test compiled is read back by the next test that builds it, in any worker. Never the
# user's own cache directory; a JAXSPEC_COMPILATION_CACHE_DIR set outside is kept (``off``
# turns it off). Tests that count XLA compiles turn it off around their count
# (helpers.no_compilation_cache); tests/test_compilation_cache.py runs subprocesses of its own.
_USER_CACHE_DIR = os.environ.get("JAXSPEC_COMPILATION_CACHE_DIR")
# JAX locks the shared directory (filelock) only when its size is bounded.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(64 << 30))
_CACHE_DIR = pytest.StashKey[str]()
# gcsfs picks its filesystem class when imported: the plain one, which the GCS emulator of
# tests/gcs_emulator.py serves (the default one also asks a gRPC API the emulator lacks).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def pytest_configure(config: pytest.Config) -> None:
    """In the controller (or a run without xdist): make this run's cache directory; the
    workers, started after this, inherit it through the environment."""
    if hasattr(config, "workerinput") or _USER_CACHE_DIR is not None:
        return
    config.stash[_CACHE_DIR] = tempfile.mkdtemp(prefix="jaxspec-test-xla-")
    os.environ["JAXSPEC_COMPILATION_CACHE_DIR"] = config.stash[_CACHE_DIR]


def pytest_unconfigure(config: pytest.Config) -> None:
    cache_dir = config.stash.get(_CACHE_DIR, None)
    if cache_dir is not None:
        shutil.rmtree(cache_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """fake-gcs-server on 127.0.0.1 with the bucket ``jaxspec-test``, every client of this
    process pointed at it (tests/gcs_emulator.py); stopped at the end of the session."""
    from tests.gcs_emulator import GcsEmulator, point_clients_at

    emulator = GcsEmulator(tmp_path_factory.mktemp("gcs") / "server")
    emulator.start()
    emulator.bucket = "jaxspec-test"
    emulator.create_bucket(emulator.bucket)
    saved = point_clients_at(emulator.url)
    try:
        yield emulator
    finally:
        emulator.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# Grouped training scans are cut to about DISPATCH_SECS of measured step time; on a
# shared CI machine the timings vary, so tests that count scans would see varying sizes.
# Here the cap is the group's limit once a step is timed (the first scan of a call still
# runs at most FIRST_DISPATCH_STEPS); tests/test_preemption.py sets a real bound itself.
from jaxspec.loop import dispatch_bound  # noqa: E402

dispatch_bound.DISPATCH_SECS = float("inf")
