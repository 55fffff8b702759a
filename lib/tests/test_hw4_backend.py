"""The character backend obeys the PolicyBackend contract (on a small random model: no pretraining)."""

import pytest
import torch

from llmrl.hw4 import charlm
from llmrl.backends.protocol import PolicyBackend
from llmrl.sampling import Rollout as RolloutBatch
from llmrl.hw4.char_backend import CharBackend, make_backend, top_p_filter
from llmrl.tinylm import TinyLM


@pytest.fixture(scope="module")
def backend():
    torch.manual_seed(0)
    model = TinyLM(vocab_size=charlm.VOCAB_SIZE, d=32, n_layers=1, n_heads=2, max_len=charlm.MAX_LEN)
    return CharBackend(model)


def test_protocol_and_layout(backend):
    assert isinstance(backend, PolicyBackend)
    prompts = ["What is 2 plus 3?", "Copy this integer exactly: -4999"]
    rb = backend.generate(prompts, 3, 10, 1.0, 0.95, torch.Generator().manual_seed(0))
    assert isinstance(rb, RolloutBatch) and rb.group_size == 3
    B, T = rb.input_ids.shape
    P = rb.prompt_len
    assert B == 6 and P == charlm.PROMPT_WIDTH and T <= P + 10
    assert rb.prompts == [p for p in prompts for _ in range(3)]      # grouped by prompt
    am = rb.attention_mask.bool()
    for i, p in enumerate(rb.prompts):
        n_pad = P - len(p) - 2  # left padding, then <bos> prompt <sep>
        assert (rb.input_ids[i, :n_pad] == charlm.PAD).all() and not am[i, :n_pad].any()
        assert am[i, n_pad:P].all() and rb.input_ids[i, n_pad] == charlm.BOS and rb.input_ids[i, P - 1] == charlm.SEP
        assert charlm.decode(rb.input_ids[i, n_pad + 1:P - 1]) == p
        comp = am[i, P:]
        n = int(comp.sum())
        assert comp[:n].all() and not comp[n:].any()                   # completion then right padding
        ids = rb.input_ids[i, P:P + n].tolist()
        assert charlm.EOS not in ids[:-1]                              # EOS, if any, is last and real
        assert (rb.input_ids[i, P + n:] == charlm.PAD).all()
        assert rb.completions[i] == charlm.decode(ids)
        assert len(rb.completions[i]) == n - (ids[-1] == charlm.EOS)
    assert not set(rb.input_ids[:, P:][am[:, P:]].tolist()) & {charlm.PAD, charlm.BOS, charlm.SEP}


def test_greedy_is_deterministic_and_seeded_sampling_repeats(backend):
    a = backend.generate(["What is 4 times 5?"], 2, 8, 0.0, 1.0, None)
    assert a.completions[0] == a.completions[1]
    s1 = backend.generate(["What is 4 times 5?"], 4, 8, 1.0, 1.0, torch.Generator().manual_seed(7))
    s2 = backend.generate(["What is 4 times 5?"], 4, 8, 1.0, 1.0, torch.Generator().manual_seed(7))
    assert s1.completions == s2.completions and torch.equal(s1.input_ids, s2.input_ids)


def test_logits_reference_and_parameters(backend, tmp_path):
    rb = backend.generate(["What is 1 plus 1?"], 2, 5, 1.0, 1.0, torch.Generator().manual_seed(1))
    lg = backend.logits(rb.input_ids, rb.attention_mask)
    assert lg.shape == (*rb.input_ids.shape, charlm.VOCAB_SIZE) and lg.requires_grad
    ref = backend.logits(rb.input_ids, rb.attention_mask, reference=True)
    assert not ref.requires_grad and torch.allclose(lg, ref)
    params = backend.trainable_parameters()
    with torch.no_grad():
        params[0].add_(0.5)
    assert not torch.allclose(backend.logits(rb.input_ids, rb.attention_mask), ref)  # the reference stays frozen
    path = tmp_path / "policy.pt"
    backend.save(path)
    before = backend.logits(rb.input_ids, rb.attention_mask).detach()
    with torch.no_grad():
        params[0].sub_(0.5)
    backend.load(path)
    assert torch.allclose(backend.logits(rb.input_ids, rb.attention_mask), before)


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.tensor([[3.0, 2.0, 1.0, -5.0]]).log_softmax(-1)
    p = logits.exp()[0]
    kept = torch.isfinite(top_p_filter(logits, float(p[0] + 0.01)))[0].tolist()
    assert kept == [True, True, False, False]
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()
    assert torch.isfinite(top_p_filter(logits, 1e-6))[0].tolist() == [True, False, False, False]


def test_bad_input_raises(backend, tmp_path):
    with pytest.raises(ValueError, match="prompts"):
        backend.generate("What is 1 plus 1?", 2, 5, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="vocabulary"):
        backend.generate(["What is 1 \u00d7 1?"], 1, 5, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="at most"):
        backend.generate(["x" * 60], 1, 5, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        backend.generate(["hi"], 1, 100, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="top_p"):
        backend.generate(["hi"], 1, 5, 1.0, 0.0, None)
    with pytest.raises(ValueError, match="temperature"):
        backend.generate(["hi"], 1, 5, -1.0, 1.0, None)
    with pytest.raises(TypeError, match="group_size"):
        backend.generate(["hi"], 1.5, 5, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="attention_mask"):
        backend.logits(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4))
    with pytest.raises(ValueError, match="kind"):
        make_backend("gpt")
    with pytest.raises(ValueError, match="vocab_size"):
        CharBackend(TinyLM())
    torch.save({"kind": "hf"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a character-model checkpoint"):
        backend.load(tmp_path / "other.pt")


def test_pretrain_batch_layout():
    cfg = charlm.PretrainConfig(batch_size=8)
    tokens, mask = charlm.pretrain_batch(cfg, torch.Generator().manual_seed(0))
    assert tokens.shape[0] == 8 and mask.shape == (8, tokens.shape[1] - 1)
    for row, m in zip(tokens, mask):
        targets = row[1:][m]
        assert targets[-1] == charlm.EOS and charlm.PAD not in targets.tolist()
        assert m[charlm.PROMPT_WIDTH - 1] and not m[:charlm.PROMPT_WIDTH - 1].any()  # loss on the completion only
    with pytest.raises(ValueError, match="copy_fraction"):
        charlm.PretrainConfig(copy_fraction=2.0)
    with pytest.raises(TypeError, match="cfg"):
        charlm.load_base_model("default")
