"""pass@k, advantages, losses, rewards and evaluation helpers on hand-made inputs."""

import math

import numpy as np
import pytest
import torch

from llmrl import addition as A
from llmrl.advantages import group_advantages
from llmrl.evaluation import distinct_answers, exact_token_kl, pass_at_k, token_entropy
from llmrl.losses import LossBatch, clip_stats, clipped_pg_loss, full_vocab_kl, kl_estimate
from llmrl.rewards import (RubricItem, binary_rubric, exact_match, has_leading_zero, partial_credit_rubric,
                           proxy_reward, stylish_rubric)
from llmrl.sampling import generate
from llmrl.tinylm import TinyLM


@pytest.mark.parametrize("n,c,k", [(10, 3, 1), (10, 3, 5), (64, 0, 8), (64, 64, 8), (20, 19, 2), (7, 2, 7)])
def test_pass_at_k_matches_combinatorics(n, c, k):
    want = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_stable_and_vectorised():
    v = pass_at_k(1000, 1, 500)
    assert v == pytest.approx(0.5, abs=1e-9)
    arr = pass_at_k(np.array([10, 10]), np.array([0, 10]), 3)
    assert arr.tolist() == [0.0, 1.0]
    assert pass_at_k(16, 4, 1) == pytest.approx(4 / 16)  # pass@1 is the plain success rate
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)


def test_advantages_on_hand_made_groups():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    mean = group_advantages(r, 4, "mean").view(3, 4)
    assert torch.allclose(mean[0], torch.tensor([0.75, -0.25, -0.25, -0.25]))
    assert (mean[1:] == 0).all()  # all-one and all-zero groups carry no signal
    std = group_advantages(r, 4, "std").view(3, 4)
    assert torch.allclose(std[0], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.1875 ** 0.5 + 1e-6))
    assert torch.isfinite(std).all() and (std[1:] == 0).all()
    mx = group_advantages(r, 4, "maxrl").view(3, 4)
    assert torch.allclose(mx[0], torch.tensor([3.0, -1.0, -1.0, -1.0]))  # (r - p)/p with p = 1/4
    assert (mx[1:] == 0).all() and torch.isfinite(mx).all()
    assert group_advantages(r.view(3, 4), kind="mean").shape == (3, 4)


def test_advantages_bad_input():
    with pytest.raises(ValueError, match="kind"):
        group_advantages(torch.zeros(4), 2, "median")
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="multiple"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(TypeError, match="float"):
        group_advantages(torch.zeros(4, dtype=torch.long), 2)


def test_kl_estimators():
    l = torch.tensor([0.5, -0.5, 0.0])
    assert torch.allclose(kl_estimate(l, torch.zeros(3), "k1"), l)
    assert torch.allclose(kl_estimate(l, torch.zeros(3), "k2"), l * l / 2)
    assert torch.allclose(kl_estimate(l, torch.zeros(3), "k3"), torch.exp(-l) - 1 + l)
    assert (kl_estimate(l, torch.zeros(3), "k3") >= 0).all()
    with pytest.raises(ValueError, match="estimator"):
        kl_estimate(l, l, "k4")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k3_is_non_negative_on_every_token_and_unbiased(seed):
    """hw4's KL estimator e^d - d - 1 (d = log p_ref - log p) on 200,000 tokens drawn from p =
    (0.6, 0.25, 0.1, 0.05) against p_ref = (0.3, 0.3, 0.2, 0.2): never negative, and its mean within
    2% of the exact KL (the sampling error of the mean is below 1%)."""
    p = torch.tensor([0.6, 0.25, 0.1, 0.05], dtype=torch.float64)
    ref = torch.tensor([0.3, 0.3, 0.2, 0.2], dtype=torch.float64)
    exact = float((p * (p / ref).log()).sum())
    idx = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(seed))
    k3 = kl_estimate(p.log()[idx], ref.log()[idx], "k3")
    assert float(k3.min()) >= 0.0
    assert abs(float(k3.mean()) / exact - 1) < 0.02


def test_clip_fraction_on_a_hand_made_batch():
    # four tokens: ratio 1.5 with A>0 (upper clip), 0.5 with A<0 (lower clip), 1.1 with A>0, 0.9 with A<0
    ratio = torch.tensor([[1.5, 0.5, 1.1, 0.9]])
    old = torch.log(torch.tensor([[0.1, 0.9, 0.1, 0.9]]))
    adv_tok = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    s = clip_stats(ratio, adv_tok, mask, old, 0.2, 0.2, rare_prob=0.5)
    assert s["clip_fraction"] == 0.5 and s["clip_fraction_high"] == 0.25 and s["clip_fraction_low"] == 0.25
    assert s["clip_high_of_positive_rare"] == 0.5 and math.isnan(s["clip_high_of_positive_common"])
    assert s["clip_low_of_negative_common"] == 0.5
    s2 = clip_stats(ratio, adv_tok, mask, old, 0.2, None, rare_prob=0.5)
    assert s2["clip_fraction_high"] == 0.0


def test_clipped_loss_value_and_gradient():
    lp = torch.log(torch.tensor([[0.6, 0.3]])).requires_grad_()
    old = torch.log(torch.tensor([[0.4, 0.3]]))
    b = LossBatch(logprobs=lp, logits=torch.zeros(1, 2, 3), old_logprobs=old, mask=torch.tensor([[True, True]]),
                  advantages=torch.tensor([1.0]), rewards=torch.tensor([1.0]))
    loss, stats = clipped_pg_loss(b)
    # token 1: ratio 1.5 clipped to 1.2 (no gradient); token 2: ratio 1 -> surrogate 1
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 2, abs=1e-6)
    loss.backward()
    assert lp.grad[0, 0] == 0 and lp.grad[0, 1] == pytest.approx(-0.5)
    assert stats["clip_fraction_high"] == 0.5


def test_full_vocab_kl_and_entropy():
    p = torch.log(torch.tensor([[[0.5, 0.5]]]))
    q = torch.log(torch.tensor([[[0.9, 0.1]]]))
    want = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert full_vocab_kl(p, q).item() == pytest.approx(want, abs=1e-6)
    assert token_entropy(p, torch.ones(1, 1, dtype=torch.bool)) == pytest.approx(math.log(2), abs=1e-6)
    m = TinyLM()
    roll = generate(m, A.sample_problems(4, generator=0), 2, 1.0, 0)
    assert exact_token_kl(m, m, roll) == pytest.approx(0.0, abs=1e-6)


def test_rewards():
    resp, ans = ["85", "8512", "58", "", "085"], [85, 85, 85, 85, 85]
    assert exact_match(resp, ans).tolist() == [1, 0, 0, 0, 0]
    assert proxy_reward(resp, ans).tolist() == pytest.approx([1.2, 1.4, 0.2, 0.0, 1.3])
    assert proxy_reward(resp, ans, length_bonus=0.0).tolist() == [1, 1, 0, 0, 1]
    assert binary_rubric()(resp, ans).tolist() == [1, 0, 0, 0, 0]
    pc = partial_credit_rubric()(resp, ans)
    assert pc[0] == pytest.approx(1.0) and 0 < pc[2] < 1 and pc[3] == 0
    st = stylish_rubric(2.0)(resp, ans)
    assert st.tolist() == pytest.approx([1.0, 2.0, 0.0, 0.0, 2.0])  # padding "085" pays 2, the truth 1
    fixed = stylish_rubric(2.0).with_item(RubricItem("leading_zero", has_leading_zero, -3.0))
    assert fixed(resp, ans)[4].item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="length"):
        exact_match(["1"], [1, 2])
    with pytest.raises(ValueError, match="w"):
        stylish_rubric(-1.0)


def test_distinct_answers_bounds():
    from llmrl.sft.checkpoints import load_checkpoint

    p = A.sample_problems(5, generator=0)
    # an untrained model writes no well-formed answer at all (a malformed sample is no answer)
    assert distinct_answers(TinyLM(), p, 8, 0.0, 0) <= 1.0
    m = load_checkpoint("sft", progress=False)
    assert distinct_answers(m, p, 8, 0.0, 0) == 1.0  # greedy: one answer per problem, a number
    assert 1.0 < distinct_answers(m, p, 8, 2.0, 0) <= 8.0
