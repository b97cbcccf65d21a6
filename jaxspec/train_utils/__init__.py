"""JAX training utilities for model_fns, below the engine (jax and optax only): loss
scaling (``loss_scale``), gradient accumulation (``microbatch``), EMA weights (``ema``),
mixed precision (``mixed_precision``), ``CrossShardOptimizer`` (``tpu_optimizer``) and the
learning rate read from an optax state (``learning_rate``). ``docs/recipes.md`` shows
each in use."""
