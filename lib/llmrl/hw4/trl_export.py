"""The old name of :mod:`llmrl.hw4.trl_runner` (hw4's runs on TRL's GRPOTrainer; it trains, it does
not export). Importing this module gives the TRL runner itself: ``llmrl.hw4.trl_export is
llmrl.hw4.trl_runner``. The command line keeps ``python -m llmrl.hw4 train-trl``.
"""

import sys

from . import trl_runner

sys.modules[__name__] = trl_runner
