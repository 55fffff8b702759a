"""The store layer: the shipped models' loader and the checkpoint file format (imports only the core)."""
