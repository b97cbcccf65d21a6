"""Storage: what lands on disk (Orbax checkpoints and their integrity records,
TensorBoard event files). Below hooks and loop; imports neither."""
