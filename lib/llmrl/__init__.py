"""llmrl: the shared library of the RL-for-language-models course.

Modules, one concept each: :mod:`llmrl.tinylm` (the model), :mod:`llmrl.addition` (the task),
:mod:`llmrl.checkpoints` (SFT and cached models), :mod:`llmrl.sampling` (generation and log-probs),
:mod:`llmrl.evaluation`, :mod:`llmrl.rewards`, :mod:`llmrl.advantages`, :mod:`llmrl.losses`,
:mod:`llmrl.trainer` (``rl_train``) and :mod:`llmrl.bench`.
"""

__version__ = "0.1.0"
