"""JAX's persistent compilation cache, on by default for jaxspec's Estimators, so that a
new process on an existing model_dir runs its first loop without an XLA compile.

The cache directory is, in order: ``JAXSPEC_COMPILATION_CACHE_DIR`` when set (``""``,
``0``, ``off``, ``false`` or ``none`` switch the cache off), a directory the user already
gave JAX (``jax_compilation_cache_dir``, left as it is), else a per-user default,
``$XDG_CACHE_HOME/jaxspec/xla`` (``~/.cache/jaxspec/xla``).
"""

from __future__ import annotations

import logging
import os

import jax

_log = logging.getLogger("jaxspec")

ENV_VAR = "JAXSPEC_COMPILATION_CACHE_DIR"
_OFF = {"", "0", "off", "false", "none"}
_configured = False


def default_cache_dir() -> str:
    """The per-user default: ``$XDG_CACHE_HOME/jaxspec/xla`` or ``~/.cache/jaxspec/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxspec", "xla")


def enable_compilation_cache(path: str | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache; returns the directory, or None when off.

    Args:
      path: the cache directory (str); None: ``JAXSPEC_COMPILATION_CACHE_DIR``, else the
        directory already configured in JAX, else ``default_cache_dir()``.

    Every compiled program is cached, however short its compile
    (``jax_persistent_cache_min_compile_time_secs`` is set to 0: jaxspec's loops on small
    models compile in well under JAX's default of one second). This is process-wide JAX
    configuration; it takes effect for programs compiled after the call. Estimators call
    it once per process with ``path=None``; call it earlier with a path to choose another
    directory, or set ``JAXSPEC_COMPILATION_CACHE_DIR=off`` to keep the cache off.
    """
    global _configured
    _configured = True
    if path is None:
        env = os.environ.get(ENV_VAR)
        if env is not None and env.strip().lower() in _OFF:
            return None
        path = env or jax.config.jax_compilation_cache_dir or default_cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:  # a read-only home: run without the cache rather than fail
        _log.warning("JAX compilation cache off: cannot create %s (%s).", path, err)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def ensure_compilation_cache() -> None:
    """``enable_compilation_cache()`` once per process (no-op after the first call, or
    after the user called ``enable_compilation_cache`` themselves)."""
    if not _configured:
        enable_compilation_cache()
