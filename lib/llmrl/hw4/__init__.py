"""hw4: GR-REINFORCE against GRPO on language models (CPU character model, or HF models on a GPU).

Interfaces: ``tasks.make_task(name, **kw)`` (Task protocol), ``char_backend.make_backend(kind, **kw)``
(PolicyBackend protocol, ``backend.py``), ``impl.load_impl(path | "reference")`` (the student's eight
functions), ``trainer.train(config, impl, run_dir=...)``, ``ablation.sweep``; command line:
``python -m llmrl.hw4 train --task format_copy --algo grpo``.
"""
