"""TinyLM, the addition task and sampling: shapes, the shift, the cache, determinism, bad input."""

import pytest
import torch

from llmrl import addition as A
from llmrl.sampling import generate, gather_logprobs, response_logits, response_logprobs, sample_token
from llmrl.tinylm import TinyLM, TinyLMConfig


def test_sizes():
    assert A.VOCAB_SIZE == 15
    n = TinyLM().num_parameters()
    assert 90_000 <= n <= 110_000, n  # "about 100k parameters"
    assert TinyLM(d=48).num_parameters() < n
    with pytest.raises(ValueError, match="n_heads"):
        TinyLM(d=50, n_heads=4)


def test_the_activation_is_part_of_the_configuration():
    torch.manual_seed(0)
    relu, gelu = TinyLM(), TinyLM(activation="gelu")
    assert gelu.num_parameters() == relu.num_parameters()  # the same weights, another nonlinearity
    gelu.load_state_dict(relu.state_dict())
    x = torch.randint(0, A.VOCAB_SIZE, (3, 9))
    with torch.no_grad():
        h = relu.blocks[0].ln2(relu.tok(x) + relu.pos(torch.arange(9)))
        pre = relu.blocks[0].fc(h)
        assert torch.equal(relu.blocks[0].act(pre), torch.relu(pre))
        assert torch.equal(gelu.blocks[0].act(pre), torch.nn.functional.gelu(pre))  # erf form, as torch's default
        assert not torch.allclose(relu(x), gelu(x))
    assert TinyLMConfig(activation="gelu").to_dict()["activation"] == "gelu"
    with pytest.raises(ValueError, match="activation must be one of"):
        TinyLMConfig(activation="tanh")


def test_prompt_encoding_and_buckets():
    p = A.Problems.from_pairs([(37, 48), (3, 4), (507, 8), (32, 41), (67, 58)])
    assert A.decode(p.prompt_tokens()) == ["37+48=", "3+4=", "507+8=", "32+41=", "67+58="]
    assert [p.names[i] for i in p.bucket] == ["2d+2d_carry", "1d+1d", "3d+1d", "2d+2d_nocarry", "2d+2d_ge100"]
    toks = p.prompt_tokens()
    assert toks.shape == (5, A.PROMPT_LEN) and (toks[:, -1] == A.EQUALS).all()
    assert toks[1, 0] == A.PAD and toks[1, 2] == A.BOS  # "3+4=" is left-padded
    s = A.sample_problems(2000, A.BUCKETS, 0)
    for i, name in enumerate(A.BUCKETS):
        sel = s.bucket == i
        a, b = s.a[sel], s.b[sel]
        pairs = set(map(tuple, A.bucket_pairs(name).tolist()))
        assert all((x, y) in pairs for x, y in zip(a.tolist(), b.tolist()))


def test_sft_mix_rare_1d_and_no_3d():
    p = A.sample_problems(20_000, A.SFT_MIX, 0)
    share = (p.bucket == A.BUCKETS.index("1d+1d")).float().mean().item()
    assert 0 < share < 0.02  # rare, but present
    assert not (p.bucket == A.BUCKETS.index("3d+1d")).any()


def test_bad_input():
    with pytest.raises(ValueError, match="unknown bucket"):
        A.sample_problems(3, ["4d+4d"])
    with pytest.raises(ValueError, match="vocabulary"):
        A.encode_prompts(["3*4="])
    with pytest.raises(ValueError, match="tokens"):
        TinyLM()(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="group_size"):
        generate(TinyLM(), A.sample_problems(2, generator=0), group_size=0)
    with pytest.raises(TypeError, match="problems"):
        generate(TinyLM(), [(1, 2)])


def test_logprobs_match_a_per_token_loop():
    torch.manual_seed(0)
    m = TinyLM()
    roll = generate(m, A.sample_problems(6, A.BUCKETS, 1), 3, 1.0, 2)
    lp = response_logprobs(m, roll.tokens)
    for i in range(len(roll)):
        for t in range(A.RESPONSE_LEN):
            col = A.PROMPT_LEN + t
            logits = m(roll.tokens[i:i + 1, :col])[0, -1]  # everything before the token
            want = torch.log_softmax(logits, -1)[roll.tokens[i, col]]
            assert torch.allclose(lp[i, t], want, atol=1e-5)
    # the sampler's own log-probs agree on the tokens it chose
    m_ = roll.response_mask
    assert torch.allclose(lp[m_], roll.sample_logprobs[m_], atol=1e-5)


def test_grouped_prefix_gives_same_logits():
    m = TinyLM()
    roll = generate(m, A.sample_problems(4, A.BUCKETS, 3), 5, 1.0, 4)
    a, b = response_logits(m, roll.tokens), response_logits(m, roll.tokens, group_size=5)
    assert torch.allclose(a, b, atol=1e-5)


def test_no_gradient_reaches_prompt_positions():
    B, T, V = 3, A.SEQ_LEN, A.VOCAB_SIZE
    leaf = torch.randn(B, T - 1, V, requires_grad=True)

    def fake_model(tokens, logits_from=0, **kw):
        return leaf[:, logits_from:]

    tokens = torch.randint(0, 10, (B, T))
    lp = gather_logprobs(response_logits(fake_model, tokens), tokens[:, A.PROMPT_LEN:])
    lp.sum().backward()
    assert (leaf.grad[:, :A.PROMPT_LEN - 1] == 0).all()
    assert (leaf.grad[:, A.PROMPT_LEN - 1:].abs().sum(-1) > 0).all()


def test_generation_rules_and_temperature_zero():
    m = TinyLM()
    p = A.sample_problems(8, A.BUCKETS, 5)
    g1 = generate(m, p, 1, 0.0, 0)
    g2 = generate(m, p, 1, 0.0, 99)
    assert torch.equal(g1.tokens, g2.tokens)  # greedy ignores the seed
    r = g1.response_tokens
    assert (r[:, -1] == A.EOS).all() | (r == A.EOS).any(1).all()  # every response ends
    assert all(len(s) <= A.MAX_ANSWER_CHARS for s in g1.responses)
    # a response that reached the cap has its EOS outside the mask (not a policy choice)
    capped = ~(g1.response_mask & (r == A.EOS)).any(1)
    assert (~g1.response_mask[capped, -1]).all()
    logits = torch.tensor([[0.0, 5.0, 1.0]])
    assert sample_token(logits, 0.0).item() == 1


def test_sampling_is_deterministic_per_seed():
    m = TinyLM()
    p = A.sample_problems(8, generator=0)
    a, b, c = (generate(m, p, 4, 1.0, s).tokens for s in (7, 7, 8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_temperature_sharpens_and_flattens():
    torch.manual_seed(0)
    logits = torch.randn(1, 15).repeat(4000, 1)
    g = torch.Generator().manual_seed(0)
    cold = sample_token(logits, 0.3, g)
    hot = sample_token(logits, 3.0, g)
    top = logits[0].argmax()
    assert (cold == top).float().mean() > (hot == top).float().mean() + 0.2


def test_generate_takes_a_custom_sampler():
    m = TinyLM()
    seen = []

    def greedy(logits, temperature, generator=None):
        seen.append(logits.shape)
        return logits.argmax(-1)

    p = A.sample_problems(3, generator=0)
    a = generate(m, p, 2, 1.0, 0, sampler=greedy)
    b = generate(m, p, 2, 0.0, 0)
    assert torch.equal(a.tokens, b.tokens) and seen[0] == (6, A.VOCAB_SIZE)
    with pytest.raises(ValueError, match="sampler"):
        generate(m, p, 2, 1.0, 0, sampler=lambda l, t, g: l.argmax(-1)[:1])
    with pytest.raises(TypeError, match="sampler"):
        generate(m, p, sampler="argmax")
