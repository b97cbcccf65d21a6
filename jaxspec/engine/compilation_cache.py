"""The old home of the compilation cache settings; they live in
``jaxspec.compilation_cache``."""

from jaxspec.compilation_cache import (
    ENV_VAR,
    default_cache_dir,
    enable_compilation_cache,
    ensure_compilation_cache,
)

__all__ = ["ENV_VAR", "default_cache_dir", "enable_compilation_cache", "ensure_compilation_cache"]
