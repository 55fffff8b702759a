"""Experiment and widget code behind the lab notebooks, one module per lab (and lab19's overoptimization maths, :mod:`llmrl.labs.overopt`)."""
