"""The old path of :mod:`llmrl.tasks.rewards`, kept for the notebooks: the same module object under both names."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("llmrl.tasks.rewards")
