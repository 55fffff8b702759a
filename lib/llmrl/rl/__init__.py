"""The RL layer: advantages, losses, the metric vocabulary, evaluation, the config, the step's stages, the run and its loop, data parallelism."""
