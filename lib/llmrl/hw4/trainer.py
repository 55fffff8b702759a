"""The old name of :mod:`llmrl.hw4.run_manager` (hw4's run manager around the library's RL loop).

Kept because the hw4 notebook and the copies students already have import ``llmrl.hw4.trainer``
(``default_config``, ``read_jsonl``, ``train``). Importing this module gives the run manager itself:
``llmrl.hw4.trainer is llmrl.hw4.run_manager``, so a name set on one is set on the other.
"""

import sys

from . import run_manager

sys.modules[__name__] = run_manager
