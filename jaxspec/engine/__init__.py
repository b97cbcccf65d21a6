"""The engine: a model_fn turned into compiled step functions (jit, shard_map, lax.scan)."""
