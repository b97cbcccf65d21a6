"""The host side: input_fn to devices, hooks, checkpoints, summaries, logging."""
