"""HFBackend (llmrl.hw4.hf_backend) on tiny random-weight models built offline.

Skipped only when the hf extra (transformers, peft) is not installed."""

import pytest

pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")
pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")

import torch  # noqa: E402

from llmrl.backends.protocol import PolicyBackend  # noqa: E402
from llmrl.sampling import Rollout as RolloutBatch  # noqa: E402
from llmrl.hw4.hf_backend import (  # noqa: E402
    LORA_TARGETS, HFBackend, char_tokenizer, load_pretrained, lora_targets, tiny_random_model)

PROMPTS = ["Copy this integer exactly: 7", "Copy this integer exactly: -1234"]


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


def make(tok, seed=0, **kw):
    kw.setdefault("device", "cpu")
    return HFBackend(tiny_random_model(tok, seed=seed), tok, **kw)


def perturb_adapter(backend, scale=0.5, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in backend.trainable_parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def test_protocol_lora_defaults_and_dtype(tok):
    b = make(tok)
    assert isinstance(b, PolicyBackend)
    cfg = b.lora_config
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (16, 32, 0.05)
    assert sorted(cfg.target_modules) == sorted(LORA_TARGETS)  # Qwen2 has all seven projections
    names = [n for n, p in b.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)  # only the adapter trains
    assert b.dtype == torch.float32 and all(p.dtype == torch.float32 for p in b.model.parameters())
    assert b.ref_model is None  # the reference is the same weights with the adapter off


def test_only_existing_target_modules_are_used(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, bos_token_id=2, eos_token_id=1))
    assert lora_targets(gpt2) == []  # GPT-2 names its projections c_attn, c_proj, c_fc
    with pytest.raises(ValueError, match="target_modules"):
        HFBackend(gpt2, tok, device="cpu")
    b = HFBackend(gpt2, tok, device="cpu", target_modules=("q_proj", "c_attn"))
    assert list(b.lora_config.target_modules) == ["c_attn"]


def test_left_padding_and_rollout_layout(tok):
    b = make(tok)
    rb = b.generate(PROMPTS, group_size=3, max_new_tokens=6, temperature=1.0, top_p=1.0,
                    generator=torch.Generator().manual_seed(0))
    assert isinstance(rb, RolloutBatch)
    B, T = rb.input_ids.shape
    P = rb.prompt_len
    assert B == 6 and rb.group_size == 3 and rb.prompts == [p for p in PROMPTS for _ in range(3)]
    prompt_mask = rb.attention_mask[:, :P]
    assert (prompt_mask[:, -1] == 1).all()  # every prompt ends at column P-1: padding is on the left
    short = rb.prompts.index(PROMPTS[0])
    assert prompt_mask[short, 0] == 0 and (rb.input_ids[short, :P][prompt_mask[short] == 0] == b.pad_token_id).all()
    comp_mask = rb.attention_mask[:, P:]
    lengths = comp_mask.sum(1)
    assert (lengths >= 1).all() and (lengths <= 6).all() and T - P == int(lengths.max())
    for i in range(B):  # completion tokens are contiguous from column P (right padding after them)
        assert comp_mask[i, :lengths[i]].all() and not comp_mask[i, lengths[i]:].any()
        assert rb.completions[i] == tok.decode(rb.input_ids[i, P:P + lengths[i]].tolist(), skip_special_tokens=True)


def test_greedy_rollouts_match_the_logits_used_for_training(tok):
    """The logits the trainer scores with (position ids from the left-padded mask) must be the ones
    generation sampled from: the greedy tokens are their argmax, on padded and unpadded rows."""
    b = make(tok, seed=3)
    perturb_adapter(b, 0.3)
    rb = b.generate(PROMPTS, 1, 8, temperature=0.0, top_p=1.0, generator=None)
    with torch.no_grad():
        logits = b.logits(rb.input_ids, rb.attention_mask)
    P = rb.prompt_len
    pred = logits[:, P - 1:-1].argmax(-1)
    got = rb.input_ids[:, P:]
    m = rb.attention_mask[:, P:].bool()
    assert torch.equal(pred[m], got[m])


def test_sampling_is_seeded_and_temperature_top_p_are_honoured(tok):
    b = make(tok, seed=4)
    args = (PROMPTS, 4, 8)
    r1 = b.generate(*args, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(5))
    r2 = b.generate(*args, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(5))
    r3 = b.generate(*args, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(6))
    assert torch.equal(r1.input_ids, r2.input_ids) and r1.completions != r3.completions
    greedy = b.generate(*args, temperature=0.0, top_p=1.0, generator=None)
    assert len(set(greedy.completions[:4])) == 1  # greedy: the whole group is identical
    nucleus = b.generate(*args, temperature=1.0, top_p=1e-6, generator=torch.Generator().manual_seed(5))
    assert nucleus.completions == greedy.completions  # top_p -> 0 keeps only the top token
    assert len(set(r1.completions[:4])) > 1  # random weights at T=1: the group differs
    state = torch.random.get_rng_state()
    b.generate(*args, temperature=1.0, top_p=0.95, generator=torch.Generator().manual_seed(1))
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's global RNG is untouched


def test_reference_is_the_model_with_the_adapter_off(tok):
    b = make(tok, seed=5)
    rb = b.generate(PROMPTS, 2, 6, 1.0, 1.0, torch.Generator().manual_seed(0))
    ids, am = rb.input_ids, rb.attention_mask
    with torch.no_grad():
        before = b.logits(ids, am)
        ref_before = b.logits(ids, am, reference=True)
    assert torch.allclose(before, ref_before)  # LoRA's B starts at zero: policy == reference
    n_params = sum(p.numel() for p in b.model.parameters())
    perturb_adapter(b)
    with torch.no_grad():
        after = b.logits(ids, am)
        ref_after = b.logits(ids, am, reference=True)
    assert not torch.allclose(after, before, atol=1e-3)
    assert torch.allclose(ref_after, ref_before, atol=1e-6)
    assert sum(p.numel() for p in b.model.parameters()) == n_params  # no second copy appeared
    # gradients reach the adapter through the policy, never through the reference
    out = b.logits(ids, am)
    assert out.requires_grad and out.dtype == torch.float32
    assert not b.logits(ids, am, reference=True).requires_grad
    out.float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in b.trainable_parameters())


def test_logits_checks_its_input(tok):
    b = make(tok)
    with pytest.raises(ValueError, match="input_ids"):
        b.logits(torch.zeros(3, dtype=torch.long), None)
    with pytest.raises(ValueError, match="attention_mask"):
        b.logits(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="prompts"):
        b.generate("one prompt", 2, 4, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="top_p"):
        b.generate(PROMPTS, 2, 4, 1.0, 0.0, None)
    with pytest.raises(ValueError, match="group_size"):
        b.generate(PROMPTS, 0, 4, 1.0, 1.0, None)


def test_save_and_load_the_adapter(tok, tmp_path):
    b = make(tok, seed=6)
    perturb_adapter(b, seed=2)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = b.logits(ids, torch.ones_like(ids))
    path = tmp_path / "policy.pt"
    b.save(path)
    assert path.stat().st_size < 1_000_000  # the adapter only, not the model
    fresh = make(tok, seed=6)  # same base weights, untrained adapter
    fresh.load(path)
    with torch.no_grad():
        assert torch.allclose(fresh.logits(ids, torch.ones_like(ids)), want, atol=1e-6)
    other = make(tok, seed=6, lora_r=8)
    with pytest.raises(ValueError, match="path"):
        other.load(path)
    torch.save({"kind": "char"}, tmp_path / "char.pt")
    with pytest.raises(ValueError, match="not an HF-backend checkpoint"):
        fresh.load(tmp_path / "char.pt")


def test_pad_differs_from_eos_when_the_vocabulary_allows(tok):
    b = make(tok)
    assert b.pad_token_id != b.eos_token_id
    assert b.eos_token_id in b.stop_token_ids


def test_unloadable_model_name_gets_one_clear_error(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network retries in tests
    with pytest.raises(ValueError) as e:
        load_pretrained("nobody-here/not-a-real-model", torch.float32)
    msg = str(e.value)
    assert "nobody-here/not-a-real-model" in msg and "local path" in msg and "HF_HUB_OFFLINE" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__  # one error, no chained traceback
    with pytest.raises(ValueError, match="not a directory"):
        load_pretrained(str(tmp_path / "missing" / "model"), torch.float32)
    with pytest.raises(ValueError, match="model"):
        load_pretrained("", torch.float32)
    with pytest.raises(TypeError, match="model"):
        HFBackend(3.5)


def test_chat_template_and_fewshot_formatting(tok):
    b = make(tok, fewshot=[("Copy this integer exactly: 12", "<answer>12</answer>")], system_prompt="Be brief.")
    text = b.format_prompt("Copy this integer exactly: 5")
    assert text.index("Be brief.") < text.index("<answer>12</answer>") < text.index("exactly: 5")
    assert text.endswith("a:")  # the assistant turn is opened
    plain = make(tok, chat_template=False)
    assert plain.format_prompt("hello") == "hello"
    with pytest.raises(ValueError, match="fewshot"):
        make(tok, fewshot=[("only one",)])


def test_trainer_runs_and_resumes_with_the_hf_backend(tok, tmp_path):
    """The hw4 run manager on an HF backend: an interrupted run restarted from its last checkpoint logs
    every step once and ends on the same numbers as an uninterrupted run."""
    trainer = pytest.importorskip("llmrl.hw4.run_manager")
    from llmrl.hw4.impl import load_impl

    impl = load_impl("reference")
    cfg = trainer.default_config("format_copy", "grpo", steps=4, n_prompts=2, group_size=3, lr=1e-2,
                                 max_new_tokens=6, minibatch_size=3, grad_accum_steps=1, eval_every=2,
                                 eval_limit=4, ckpt_every=2, gen_every=2, backend="hf")

    def backend():
        return make(tok, seed=7, lora_dropout=0.0)  # no dropout: bit-for-bit comparable runs

    full = trainer.train(cfg, impl, run_dir=tmp_path / "full", backend=backend(), progress=False)

    class Stop(Exception):
        pass

    def stop_at_3(record):
        if record["step"] == 3:
            raise Stop

    with pytest.raises(Stop):
        trainer.train(cfg, impl, run_dir=tmp_path / "cut", backend=backend(), progress=False, callback=stop_at_3)
    resumed = trainer.train(cfg, impl, run_dir=tmp_path / "cut", backend=backend(), progress=False)
    logged = trainer.read_jsonl(tmp_path / "cut" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [0, 1, 2, 3, 4]  # nothing lost, nothing twice
    assert [r["step"] for r in resumed.records] == [0, 1, 2, 3, 4]
    for a, b in zip(full.records, logged):
        for k in ("reward_mean", "loss_mean", "kl_to_reference_k3_token_mean_nats", "eval_exact_match"):
            if k in a:
                assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), (a["step"], k)


def test_model_sampling_defaults_are_ignored(tok):
    """Sampling must follow the policy: a model's shipped defaults (Qwen2.5-Math ships top_k and a
    repetition penalty) would bias the samples away from the log-probs the trainer scores."""
    plain = make(tok, seed=8)
    m = tiny_random_model(tok, seed=8)
    m.generation_config.repetition_penalty = 5.0
    m.generation_config.top_k = 1
    m.generation_config.no_repeat_ngram_size = 1
    biased = HFBackend(m, tok, device="cpu")
    args = (PROMPTS, 3, 10, 1.0, 1.0)
    a = plain.generate(*args, generator=torch.Generator().manual_seed(9))
    b = biased.generate(*args, generator=torch.Generator().manual_seed(9))
    assert a.completions == b.completions
