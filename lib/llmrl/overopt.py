"""The old path of :mod:`llmrl.labs.overopt`, kept for the notebooks: the same module object under both names."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("llmrl.labs.overopt")
