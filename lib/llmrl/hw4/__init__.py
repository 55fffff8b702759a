"""hw4: GR-REINFORCE against GRPO on language models (CPU character model, or HF models on a GPU).

Interfaces: ``tasks.make_task(name, **kw)`` (the task protocol of :mod:`llmrl.tasks.task_protocol`),
``llmrl.backends.registry.make_backend(kind, **kw)`` (the policy backend seam, :mod:`llmrl.backends`),
``impl.load_impl(path | "reference")`` (the student's eight functions), ``settings.HW4Config`` and
``settings.default_config(task, algo)`` (the run's settings, one name per knob), ``run_manager.train(config,
impl, run_dir=...)`` (the run manager around the library's RL loop; ``llmrl.hw4.trainer`` is its old
name), ``trl_runner.train_trl`` (the same run on TRL's GRPOTrainer), ``ablation.sweep``; command line:
``python -m llmrl.hw4 train --task format_copy --algo grpo``.
"""
