"""hw4's name for the policy backend seam, which now lives at the top of the library.

:mod:`llmrl.backend` holds the protocol (``PolicyBackend``) and :class:`llmrl.sampling.Rollout`,
the one rollout type (``RolloutBatch`` is its hw4 name).
"""

from ..backend import PolicyBackend  # noqa: F401
from ..sampling import Rollout as RolloutBatch  # noqa: F401
