"""llmrl: the shared library of the RL-for-language-models course.

The library is in layers; a module imports only its own folder and the layers below it
(docs/architecture.md, "The library"; lib/tests/test_import_contract.py checks it):

* the core: :mod:`llmrl.utils` (argument checks, seeds, threads, the grading-mode switch), the only
  module directly in this folder;
* :mod:`llmrl.tasks`: the addition task and its tokens, rewards, the task protocol;
* :mod:`llmrl.lm`: TinyLM, its seed-stacked form, the decode loop, rollouts and log-probs, the toy LM;
* :mod:`llmrl.store`: the shipped models' loader and the checkpoint file format;
* :mod:`llmrl.backends`: the policy backend seam, its registry and the TinyLM plug-in;
* :mod:`llmrl.rl`: advantages, losses, the metric vocabulary, evaluation, the RL step
  (``rl.step.rl_step``), its config, the loop and ``rl.train.rl_train``, data parallelism;
* :mod:`llmrl.sft`: supervised training and the checkpoints the labs start from;
* :mod:`llmrl.experiments`: arms x seeds (the runner), figures, live checks, for both assignments below;
* :mod:`llmrl.labs` and :mod:`llmrl.hw4`: the assignments;
* :mod:`llmrl.tools`: ``python -m llmrl.tools.reproduce``, ``.bench``, ``.cache`` and the calibrations.

The modules that were once directly in this folder (``llmrl.sampling``, ``llmrl.losses``, ...) keep
their old paths for the notebooks: each old file makes its name the same module object as its new
home (lib/tests/test_old_paths.py lists them).

docs/spine.md describes how the RL step's parts fit.
"""

import os as _os

# The same numbers on Intel machines old and new. Intel's MKL, which torch's CPU build calls for its
# matrix products, picks a code path by the processor: on an AVX-512 machine its sums round differently
# from an AVX2 machine's, and a seeded run that samples tokens drifts apart after some twenty steps.
# Then a correct function "DIFFERS from the reference" in lab19's checks, and the stored runs, the
# published figures and the notebooks' outputs hold on one kind of machine only. MKL_CBWR=AVX2 (MKL's
# conditional numerical reproducibility) makes every Intel processor with AVX2 take the AVX2 path (an
# AMD one drifts all the same, after about 30 steps). MKL reads it at its first call, so it holds when
# llmrl is imported before any matrix product; a value the user set wins.
# lib/tests/test_reproducible_cpu.py says what other machines can expect.
_os.environ.setdefault("MKL_CBWR", "AVX2")

__version__ = "0.1.0"
