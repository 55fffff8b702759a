"""llmrl: the shared library of the RL-for-language-models course.

The library is in layers; a module imports only its own folder and the layers below it
(docs/architecture.md, "The library"; lib/tests/test_import_contract.py checks it):

* the core, the modules directly in this folder: :mod:`llmrl.tinylm` (the model), :mod:`llmrl.toylm`,
  :mod:`llmrl.addition` (the task and its tokens), :mod:`llmrl.sampling` (the decode loop, rollouts,
  log-probs), :mod:`llmrl.task_protocol`, :mod:`llmrl.rewards`, :mod:`llmrl.advantages`,
  :mod:`llmrl.losses`, :mod:`llmrl.metrics`, :mod:`llmrl.evaluation`, :mod:`llmrl.runner` (arms x
  seeds), :mod:`llmrl.utils`, ...;
* :mod:`llmrl.store`: the shipped models' loader and the checkpoint file format;
* :mod:`llmrl.backends`: the policy backend seam, its registry and the TinyLM plug-in;
* :mod:`llmrl.rl`: the RL step (``rl.step.rl_step``), its config, the loop and ``rl.train.rl_train``,
  data parallelism;
* :mod:`llmrl.sft`: supervised training and the checkpoints the labs start from;
* :mod:`llmrl.labs` and :mod:`llmrl.hw4`: the assignments;
* :mod:`llmrl.tools`: ``python -m llmrl.tools.reproduce``, ``.bench``, ``.cache`` and the calibrations.

docs/spine.md describes how the RL step's parts fit.
"""

__version__ = "0.1.0"
