"""The RL layer: the config, the step's stages, the run and its loop, data parallelism."""
