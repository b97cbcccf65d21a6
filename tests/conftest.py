"""Test setup: 8 virtual CPU devices (before JAX is imported) and the repo on sys.path."""

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The persistent XLA cache is off in tests (no writes to the user's cache directory);
# tests/test_compilation_cache.py turns it on in subprocesses of its own.
os.environ.setdefault("JAXSPEC_COMPILATION_CACHE_DIR", "off")
