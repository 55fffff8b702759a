"""Lab 21's experiments under their former name: everything lives in :mod:`llmrl.labs.lab21`.

``python -m llmrl.experiments project1 --seeds 0 1 2`` still runs (the same command line as
``python -m llmrl.labs.lab21``), and ``from llmrl import experiments`` still finds every name.
"""

import sys

from .labs.lab21 import *  # noqa: F401,F403
from .labs.lab21 import main

if __name__ == "__main__":
    sys.exit(main())
