"""llmrl: the shared library of the RL-for-language-models course.

Modules, one concept each: :mod:`llmrl.tinylm` (the model), :mod:`llmrl.addition` (the task),
:mod:`llmrl.sft.checkpoints` (SFT and cached models), :mod:`llmrl.sampling` (the decode loop, rollouts,
log-probs), :mod:`llmrl.backends` (the policy backend seam), :mod:`llmrl.task_protocol` (the task protocol),
:mod:`llmrl.evaluation`, :mod:`llmrl.rewards`, :mod:`llmrl.advantages`, :mod:`llmrl.losses`,
:mod:`llmrl.rl` (``rl_step``, ``train_loop``, ``rl_train``), :mod:`llmrl.runner` (arms x seeds),
:mod:`llmrl.metrics` (metric names), :mod:`llmrl.tools.bench`, and each lab's experiments in
:mod:`llmrl.labs`. docs/spine.md describes how they fit.
"""

__version__ = "0.1.0"
