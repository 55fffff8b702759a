"""hw4: GR-REINFORCE against GRPO on language models (CPU character model, or HF models on a GPU).

Interfaces: ``tasks.make_task(name, **kw)`` (the task protocol of :mod:`llmrl.task_protocol`),
``llmrl.backends.registry.make_backend(kind, **kw)`` (the policy backend seam, :mod:`llmrl.backends`),
``impl.load_impl(path | "reference")`` (the student's eight functions), ``trainer.train(config,
impl, run_dir=...)`` (the run manager around the library's RL step), ``ablation.sweep``; command
line: ``python -m llmrl.hw4 train --task format_copy --algo grpo``.
"""
