"""Test setup: 8 virtual CPU devices (before JAX is imported) and the repo on sys.path."""

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The persistent XLA cache is off in tests (no writes to the user's cache directory);
# tests/test_compilation_cache.py turns it on in subprocesses of its own.
os.environ.setdefault("JAXSPEC_COMPILATION_CACHE_DIR", "off")

# Grouped training scans are cut to about DISPATCH_SECS of measured step time; on a
# shared CI machine the timings vary, so tests that count scans would see varying sizes.
# Here the cap is the group's limit once a step is timed (the first scan of a call still
# runs at most FIRST_DISPATCH_STEPS); tests/test_preemption.py sets a real bound itself.
from jaxspec.loop import dispatch_bound  # noqa: E402

dispatch_bound.DISPATCH_SECS = float("inf")
