"""Build every cached model the course uses: ``python -m llmrl.cache`` (``make warm``).

The labs load TinyLM's SFT checkpoints and hw4 its character model from the cache
(``$LLMRL_CACHE`` or ``~/.cache/llmrl``), building them on first use. The autograder builds them
here, before it starts any student kernel: the sandbox gives kernels a read-only view of the
cache, so a kernel can use the models but can neither build nor replace them.
"""

from __future__ import annotations

import sys


def warm(progress: bool = False) -> None:
    from .checkpoints import COURSE_SNAPSHOTS, load_checkpoint
    from .hw4.charlm import load_base_model

    for name in COURSE_SNAPSHOTS:
        load_checkpoint(name, progress=progress)
    load_base_model(progress=progress)


if __name__ == "__main__":
    warm(progress="--progress" in sys.argv[1:])
