"""Experiment and widget code behind the lab notebooks, one module per lab."""
