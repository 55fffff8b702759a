# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Homework 4: reinforcement learning on a language model, GR-REINFORCE against GRPO
#
# In this homework you write the algorithmic core of outcome-reward RL for language models and then
# use it to train a policy twice: once with **GR-REINFORCE** (group-relative advantages, one
# on-policy gradient pass per batch of rollouts) and once with **GRPO** (the same advantages, but each
# batch reused for several epochs under a clipped importance ratio).
#
# The setting. A prompt $x$ is answered by a completion $y = (y_1, \dots, y_T)$ sampled token by token
# from the policy $\pi_\theta$. A program checks the completion and returns a reward $r(x, y)$.
# For each prompt we sample a **group** of $G$ completions and compare them with each other:
#
# $$A_{i,j} = \frac{r_{i,j} - \operatorname{mean}_j r_{i,j}}{\operatorname{std}_j r_{i,j} + 10^{-6}}$$
#
# (prompt $i$, sample $j$). A frozen copy of the starting model, $\pi_{\text{ref}}$, anchors a KL
# penalty so the policy cannot drift arbitrarily far.
#
# **The model.** On this CPU the policy is a small character-level transformer (about 100k
# parameters, `llmrl.hw4.charlm`) that was pretrained on a corpus with sloppy formatting and
# systematic arithmetic slips, so RL has real work to do. The same functions you write here also
# drive a 1.5B-parameter model on a GPU (`--backend hf`); nothing in them is specific to the small model.
#
# **The tasks.** `format_copy`: copy the integer in "Copy this integer exactly: N" into one
# `<answer>N</answer>` tag (reward 0.2 for a tag, 0.1 for nothing but the tag, 1.0 for the right
# number; at most 1.3). `math_toy`: short arithmetic questions answered as `\boxed{NUMBER}` (0.1 for a
# box, 1.0 when the last box holds the answer, 0.1 when only the last number in the text is right),
# the CPU stand-in for the MATH level-5 problems of the GPU version.
#
# **What you do.** Eight functions, in the order data flows through one training step:
# log-probs, completion mask, KL estimate; minibatches; group advantages and their optional
# normalisation; the REINFORCE loss; the GRPO loss. Then the experiments (four required runs, an
# ablation study) and five report questions.
#
# Shapes: `B` rows (prompts times group size, rows of one prompt adjacent), `T` token columns
# (prompt, then completion), `V` vocabulary. A rollout batch is left-padded to a common prompt width
# `P`, so completion tokens sit at columns `P .. T-1`; `attention_mask` is 1 on real tokens (prompt
# characters, completion characters and the end-of-sequence token) and 0 on padding.

# %%
import math

import matplotlib.pyplot as plt
import torch

from llmrl.utils import grading_mode, set_threads

set_threads(1)  # one thread: reproducible, and the fastest at this size

# What a correct solution shows with the default runs on the character model (measured here,
# one seed, so expect a few points either way); the handout's numbers, for a 1.5B model on
# real MATH problems, are in the comments.
EXPECTED = {
    "format_copy_final_reward": 1.3,             # handout: about 1.27-1.3
    "format_copy_final_eval_exact_match": 1.0,   # handout: 64/64 (materially below 0.8 means a bug)
    "format_copy_reward_jump_step": 10,          # handout: the reward jumps around step 10
    "math_base_eval": 0.27,                      # handout (MATH level 5): 0.23-0.26 before RL
    "math_reinforce_eval": 0.8,                  # handout: about 0.31 (GR-REINFORCE, MATH)
    "math_grpo_eval": 0.95,                      # handout: above 0.37 (GRPO, MATH)
}

# %% [markdown]
# ## Part 1: scoring tokens
#
# ### Task 1: per-token log-probabilities
#
# A causal language model returns logits `[B, T, V]` for an input `[B, T]`. The logits in
# **column t** were computed from tokens `0..t` and predict the token in **column t + 1**. So the
# token in column 0 is never scored, and the last column of logits predicts a token that does not
# exist yet.
#
# Write `compute_per_token_logprobs`: for every column `t` in `0 .. T-2`, the log-probability the
# model gave to the token that actually came next, `input_ids[:, t + 1]`. The result has `T - 1`
# columns; its column `t` scores token `t + 1`. Use `torch.log_softmax` over the vocabulary and
# `torch.gather`, and compute in float32 (a real model may hand you bf16 logits).


# %% nbgrader={"grade": false, "grade_id": "task1_per_token_logprobs", "locked": false, "schema_version": 3, "solution": true, "task": false}
def compute_per_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token.

    logits:    float [B, T, V], the model's output on input_ids
    input_ids: long  [B, T]
    returns:   float32 [B, T - 1]; entry [b, t] = log p(input_ids[b, t + 1] | input_ids[b, :t + 1])
    """
    ### BEGIN SOLUTION
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # [B, T-1, V]: column t predicts t+1
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1_per_token_logprobs", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_g = torch.Generator().manual_seed(0)
_logits = torch.randn(2, 5, 7, generator=_g)
_ids = torch.randint(0, 7, (2, 5), generator=_g)
_out = compute_per_token_logprobs(_logits, _ids)
assert _out.shape == (2, 4), f"expected shape [B, T-1] = (2, 4), got {tuple(_out.shape)}"
assert _out.dtype == torch.float32, f"expected float32, got {_out.dtype}"
assert (_out <= 0).all(), "log-probabilities are never positive: did you apply log_softmax?"
_out = compute_per_token_logprobs(torch.zeros(1, 4, 8), torch.tensor([[1, 2, 3, 4]]))
assert torch.allclose(_out, torch.full((1, 3), -math.log(8))), "uniform logits over 8 tokens give -log 8 each"
print("visible tests for task 1 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(1)
# A hand example where each logits column favours a different token: the shift must be right.
_probs = torch.tensor([[0.7, 0.2, 0.1],    # column 0 predicts column 1
                       [0.1, 0.8, 0.1],    # column 1 predicts column 2
                       [0.25, 0.25, 0.5],  # column 2 predicts column 3
                       [0.3, 0.3, 0.4]])   # column 3 predicts nothing
_lg = (_probs.log() + torch.tensor([[0.3], [-1.0], [2.0], [0.0]])).unsqueeze(0)
_out = compute_per_token_logprobs(_lg, torch.tensor([[2, 0, 1, 2]]))
assert torch.allclose(_out, torch.tensor([[0.7, 0.8, 0.5]]).log(), atol=1e-6), f"hand example: got {_out.exp()}"
# Against a loop.
_lg = torch.randn(3, 6, 5, generator=_g)
_ids = torch.randint(0, 5, (3, 6), generator=_g)
_want = torch.tensor([[torch.log_softmax(_lg[b, t], -1)[_ids[b, t + 1]].item() for t in range(5)] for b in range(3)])
assert torch.allclose(compute_per_token_logprobs(_lg, _ids), _want, atol=1e-5)
# bf16 logits come back as float32.
assert compute_per_token_logprobs(_lg.bfloat16(), _ids).dtype == torch.float32
# The last logits column predicts nothing and gets no gradient.
_lg = torch.randn(2, 5, 4, generator=_g, requires_grad=True)
compute_per_token_logprobs(_lg, torch.randint(0, 4, (2, 5), generator=_g)).sum().backward()
assert (_lg.grad[:, -1] == 0).all() and (_lg.grad[:, :-1].abs().sum(-1) > 0).all()
### END HIDDEN TESTS

# %% [markdown]
# ### Task 2: which tokens count
#
# Only the completion is the policy's action. The prompt was given, and padding is not text at all:
# neither may enter a loss. `build_completion_mask` returns a bool mask **aligned with the output of
# task 1**: entry `[b, t]` is True exactly when the token that column scores, `input_ids[b, t + 1]`,
# is a completion token (column `t + 1 >= prompt_len`) and a real one (`attention_mask[b, t + 1] == 1`).
#
# Example, `prompt_len = 3`, one row with a left-padded prompt and a short completion:
#
# | input column | 0 | 1 | 2 | 3 | 4 | 5 |
# |---|---|---|---|---|---|---|
# | token | pad | `Q` | `?` | `4` | eos | pad |
# | attention_mask | 0 | 1 | 1 | 1 | 1 | 0 |
# | mask column (scores input column +1) | F | F | **T** | **T** | F | |


# %% nbgrader={"grade": false, "grade_id": "task2_completion_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_completion_mask(attention_mask: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Which entries of compute_per_token_logprobs' output score a real completion token.

    attention_mask: [B, T] (int or bool), 1 on real tokens, 0 on padding
    prompt_len:     int P, completion tokens sit at columns P .. T-1
    returns:        bool [B, T - 1]; entry [b, t] is True iff column t + 1 >= P and attention_mask[b, t + 1] == 1
    """
    ### BEGIN SOLUTION
    T = attention_mask.shape[1]
    is_completion = torch.arange(1, T, device=attention_mask.device) >= prompt_len  # [T-1]
    return attention_mask[:, 1:].bool() & is_completion
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task2_completion_mask", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_am = torch.tensor([[0, 1, 1, 1, 1, 0]])
_m = build_completion_mask(_am, 3)
assert _m.dtype == torch.bool, f"expected a bool mask, got {_m.dtype}"
assert _m.shape == (1, 5), f"expected shape [B, T-1] = (1, 5), got {tuple(_m.shape)}"
assert _m.tolist() == [[False, False, True, True, False]], f"the table's example: got {_m.tolist()}"
print("visible tests for task 2 passed")

### BEGIN HIDDEN TESTS
_am = torch.tensor([[1, 1, 1, 1, 1, 1, 1],    # full-length completion
                    [0, 0, 1, 1, 1, 0, 0],    # two completion tokens, then padding
                    [0, 1, 1, 1, 1, 1, 0]])
_want = [[False, False, True, True, True, True],
         [False, False, True, True, False, False],
         [False, False, True, True, True, False]]
assert build_completion_mask(_am, 3).tolist() == _want, "prompt tokens, padding or the shift are off"
assert build_completion_mask(_am.bool(), 3).tolist() == _want, "a bool attention_mask must work too"
assert not build_completion_mask(_am, 7).any(), "no completion columns when prompt_len == T"
assert build_completion_mask(torch.ones(2, 4, dtype=torch.long), 1).all()
### END HIDDEN TESTS

# %% [markdown]
# ### Task 3: the KL penalty, estimated from sampled tokens
#
# The exact KL between two token distributions needs the whole vocabulary at every position. What
# we have cheaply is the log-probability of the **sampled** token under both policies. With
# $\Delta = \log \pi_{\text{ref}}(y_t) - \log \pi_\theta(y_t)$ for a token $y_t$ sampled from
# $\pi_\theta$, the estimator
#
# $$\hat k = e^{\Delta} - \Delta - 1$$
#
# has expectation $\mathrm{KL}(\pi_\theta \,\|\, \pi_{\text{ref}})$ and is never negative (report
# question 1 asks you why). Clamp $\Delta$ to $[-20, 20]$ before exponentiating, so one token the
# reference finds absurd cannot produce `inf`. Return the mean of $\hat k$ over all masked tokens
# of the batch (every real completion token counts once). Padding entries may hold anything,
# even `-inf`: select with `torch.where`, because `0 * inf` is `nan`.


# %% nbgrader={"grade": false, "grade_id": "task3_approx_kl", "locked": false, "schema_version": 3, "solution": true, "task": false}
def approx_kl_from_logprobs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean of the k3 estimator of KL(pi_theta || pi_ref).

    logprobs:     float [B, T-1], log pi_theta of the sampled tokens (may carry gradient)
    ref_logprobs: float [B, T-1], log pi_ref of the same tokens
    mask:         bool  [B, T-1], True on real completion tokens
    returns:      float scalar (0-dim tensor)
    """
    ### BEGIN SOLUTION
    delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    k3 = torch.exp(delta) - delta - 1.0
    return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task3_approx_kl", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_lp = torch.tensor([[math.log(0.5), math.log(0.5)]])
_ref = torch.tensor([[math.log(0.5), math.log(0.25)]])
_kl = approx_kl_from_logprobs(_lp, _ref, torch.tensor([[True, True]]))
assert _kl.ndim == 0, f"expected a scalar, got shape {tuple(_kl.shape)}"
# token 1: delta = 0 -> 0; token 2: delta = log(0.25 / 0.5) -> 0.5 + log 2 - 1
assert abs(_kl.item() - (0.5 + math.log(2) - 1) / 2) < 1e-6, f"got {_kl.item()}"
assert approx_kl_from_logprobs(_lp, _lp, torch.tensor([[True, True]])).item() == 0.0, "identical policies: 0"
print("visible tests for task 3 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(3)
# The sign: log pi_ref - log pi_theta, not the other way round (the two give different values).
_one = approx_kl_from_logprobs(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]), torch.tensor([[True]]))
assert abs(_one.item() - (0.5 + math.log(2) - 1)) < 1e-6, f"delta must be log pi_ref - log pi_theta, got {_one.item()}"
# Nonnegative for every pair, and the clamp keeps huge gaps finite.
_a, _b = torch.randn(4, 6, generator=_g) * 5, torch.randn(4, 6, generator=_g) * 5
assert approx_kl_from_logprobs(_a, _b, torch.ones(4, 6, dtype=torch.bool)) >= 0
_big = approx_kl_from_logprobs(torch.tensor([[-200.0]]), torch.tensor([[0.0]]), torch.tensor([[True]]))
assert torch.isfinite(_big) and abs(_big.item() - (math.exp(20) - 21)) / math.exp(20) < 1e-4, "clamp delta to [-20, 20]"
# Padding holding -inf is ignored; the mean runs over masked tokens of the whole batch.
_lp = torch.tensor([[-1.0, -1.0, float("-inf")], [-1.0, float("-inf"), float("-inf")]])
_ref = torch.tensor([[-2.0, -1.0, float("-inf")], [-3.0, float("-inf"), float("-inf")]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_k = lambda d: math.exp(d) - d - 1
_want = (_k(-1.0) + 0.0 + _k(-2.0)) / 3
_got = approx_kl_from_logprobs(_lp, _ref, _mk)
assert torch.isfinite(_got) and abs(_got.item() - _want) < 1e-5, f"expected the mean over the 3 real tokens {_want:.5f}, got {_got.item()}"
# Gradient flows to logprobs.
_lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
approx_kl_from_logprobs(_lp, torch.tensor([[-1.5, -1.0]]), torch.tensor([[True, True]])).backward()
assert _lp.grad is not None and _lp.grad.abs().sum() > 0
### END HIDDEN TESTS

# %% [markdown]
# ## Part 2: minibatches
#
# ### Task 4: `iter_minibatches`
#
# A rollout batch is a dict of tensors whose first dimension is the row (`input_ids`, the mask,
# old and reference log-probs, advantages, ...). An update walks it in minibatches of
# `minibatch_size` rows; with a `generator` the rows are visited in a random order
# (`torch.randperm(n, generator=generator)`), without one in order. Every field of a minibatch must
# hold **the same rows**: a log-prob paired with another row's advantage trains on noise, and no
# error message will ever tell you. The last minibatch may be smaller. Fields with different row
# counts are a bug in the caller: raise a `ValueError`.


# %% nbgrader={"grade": false, "grade_id": "task4_iter_minibatches", "locked": false, "schema_version": 3, "solution": true, "task": false}
def iter_minibatches(batch: dict, minibatch_size: int, generator: torch.Generator | None = None):
    """Yield dicts with the same keys as `batch`, each field restricted to the same rows.

    batch:          dict name -> tensor [N, ...] (same N for every field)
    minibatch_size: int >= 1, rows per minibatch (the last one may be smaller)
    generator:      shuffle the row order with it when given; keep the order when None
    yields:         dict name -> tensor [n, ...] with n <= minibatch_size; every row exactly once
    """
    ### BEGIN SOLUTION
    sizes = {k: v.shape[0] for k, v in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"every field must have the same number of rows, got {sizes}")
    n = next(iter(sizes.values()))
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    for start in range(0, n, minibatch_size):
        rows = order[start:start + minibatch_size]
        yield {k: v[rows] for k, v in batch.items()}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task4_iter_minibatches", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_batch = {"ids": torch.arange(10), "adv": torch.arange(10) * 10.0, "lp": torch.arange(20).view(10, 2)}
_mbs = list(iter_minibatches(_batch, 4))
assert [len(m["ids"]) for m in _mbs] == [4, 4, 2], f"expected sizes [4, 4, 2], got {[len(m['ids']) for m in _mbs]}"
assert torch.equal(torch.cat([m["ids"] for m in _mbs]), torch.arange(10)), "without a generator keep the order"
for _m in _mbs:
    assert set(_m) == set(_batch) and torch.equal(_m["adv"], _m["ids"] * 10.0)
print("visible tests for task 4 passed")

### BEGIN HIDDEN TESTS
_gen = torch.Generator().manual_seed(3)
_mbs = list(iter_minibatches(_batch, 3, _gen))
_seen = torch.cat([m["ids"] for m in _mbs])
assert sorted(_seen.tolist()) == list(range(10)), "every row exactly once per pass"
assert not torch.equal(_seen, torch.arange(10)), "with a generator the order must be shuffled"
for _m in _mbs:  # all fields hold the same rows
    assert torch.equal(_m["adv"], _m["ids"] * 10.0) and torch.equal(_m["lp"], torch.stack([2 * _m["ids"], 2 * _m["ids"] + 1], 1))
_a = [m["ids"].tolist() for m in iter_minibatches(_batch, 3, torch.Generator().manual_seed(5))]
_b = [m["ids"].tolist() for m in iter_minibatches(_batch, 3, torch.Generator().manual_seed(5))]
assert _a == _b, "the same generator seed gives the same order"
assert len(list(iter_minibatches(_batch, 100))) == 1
try:
    list(iter_minibatches({"a": torch.zeros(3), "b": torch.zeros(4)}, 2))
    raise AssertionError("fields with different row counts must raise ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown]
# ## Part 3: advantages
#
# ### Task 5: group-relative advantages
#
# `rewards` is `[B]` with the `G` samples of each prompt in adjacent rows (rows `0..G-1` belong to
# prompt 0, and so on). Reshape to `[B / G, G]` **first**, then standardise each row with its own
# mean and its population standard deviation (`unbiased=False`), and flatten back. A group whose
# samples all got the same reward carries no information about which completion was better: its
# advantages must come out 0 (the `1e-6` in the denominator prevents a division by zero), never `nan`.
#
# One numerical trap: in float32 the mean of eight copies of 0.1 is not exactly 0.1, the "zero"
# standard deviation comes out near 1e-8, and dividing by `1e-8 + 1e-6` turns the rounding error into
# an advantage of about 0.01 for every sample of the group. Do the arithmetic in float64
# (`rewards.double()`) and return float32.


# %% nbgrader={"grade": false, "grade_id": "task5_group_advantages", "locked": false, "schema_version": 3, "solution": true, "task": false}
def compute_group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(r - group mean) / (group std + eps), groups of `group_size` adjacent rows.

    rewards:    float [B], B a multiple of group_size
    group_size: int G >= 1
    returns:    float32 [B] (computed in float64)
    """
    ### BEGIN SOLUTION
    if rewards.ndim != 1 or rewards.shape[0] % group_size:
        raise ValueError(f"rewards must be [B] with B a multiple of group_size={group_size}, got {tuple(rewards.shape)}")
    r = rewards.double().view(-1, group_size)  # [B/G, G], float64 (see above)
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    return adv.reshape(-1).float()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task5_group_advantages", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_adv = compute_group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 2)
assert _adv.shape == (4,), f"expected shape (4,), got {tuple(_adv.shape)}"
assert torch.allclose(_adv, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-5), f"got {_adv}"
print("visible tests for task 5 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(5)
# Groups on different scales: normalising the whole batch first (or reshaping the wrong way) fails.
_r = torch.tensor([0.0, 0.1, 0.2, 10.0, 20.0, 30.0])
_want = torch.tensor([-1.2247, 0.0, 1.2247, -1.2247, 0.0, 1.2247])
assert torch.allclose(compute_group_advantages(_r, 3), _want, atol=1e-3), "normalise within each group of adjacent rows (population std)"
# A group with one shared reward: exactly zero, no nan.
_adv = compute_group_advantages(torch.tensor([1.3, 1.3, 1.3, 0.0, 1.3, 0.2]), 3)
assert torch.isfinite(_adv).all() and (_adv[:3].abs() < 1e-6).all(), f"zero-std group must give zeros, got {_adv}"
_adv = compute_group_advantages(torch.full((8,), 0.1), 8)
assert (_adv.abs() < 1e-6).all(), f"a constant float32 group gave {_adv[0].item():.2e}: compute in float64"
assert _adv.dtype == torch.float32, "return float32"
# Population std: a pair (0, 1) becomes (-1, +1), not (-0.707, 0.707).
assert torch.allclose(compute_group_advantages(torch.tensor([0.0, 1.0]), 2), torch.tensor([-1.0, 1.0]), atol=1e-5)
# Against a loop, G = 4.
_r = torch.rand(12, generator=_g)
_want = torch.cat([(_r[i:i + 4] - _r[i:i + 4].mean()) / (_r[i:i + 4].std(unbiased=False) + 1e-6) for i in range(0, 12, 4)])
assert torch.allclose(compute_group_advantages(_r, 4), _want, atol=1e-5)
# G = 1: every advantage is zero.
assert (compute_group_advantages(torch.tensor([0.3, 1.0]), 1) == 0).all()
### END HIDDEN TESTS

# %% [markdown]
# ### Task 6: optional batch normalisation and clipping
#
# Some runs standardise the advantages once more over the whole batch; the handout's runs do not
# (`normalize=False`), but they all clip advantages to `[-clip, clip]` (5.0) so one odd group cannot
# dominate a step. Write `maybe_normalize_advantages`: when `normalize` is True, subtract the batch
# mean and divide by the batch's population std plus `eps`; then, when `clip` is not None, clamp.
# Do not modify the input tensor in place.


# %% nbgrader={"grade": false, "grade_id": "task6_normalize_advantages", "locked": false, "schema_version": 3, "solution": true, "task": false}
def maybe_normalize_advantages(advantages: torch.Tensor, normalize: bool, clip: float | None = 5.0,
                               eps: float = 1e-6) -> torch.Tensor:
    """advantages: float [B]; returns float [B] (a new tensor)."""
    ### BEGIN SOLUTION
    adv = advantages
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
    if clip is not None:
        adv = adv.clamp(-clip, clip)
    return adv.clone()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task6_normalize_advantages", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_a = torch.tensor([1.0, 2.0, 3.0, 10.0])
assert torch.equal(maybe_normalize_advantages(_a, False, None), _a), "normalize=False, clip=None: unchanged"
assert torch.equal(maybe_normalize_advantages(_a, False, 2.5), torch.tensor([1.0, 2.0, 2.5, 2.5])), "clip to [-2.5, 2.5]"
print("visible tests for task 6 passed")

### BEGIN HIDDEN TESTS
_n = maybe_normalize_advantages(_a, True, None)
assert abs(_n.mean().item()) < 1e-5 and abs(_n.std(unbiased=False).item() - 1) < 1e-4, "batch mean 0, population std 1"
assert torch.equal(_a, torch.tensor([1.0, 2.0, 3.0, 10.0])), "the input must not change"
assert (maybe_normalize_advantages(torch.tensor([-9.0, 9.0, 0.0]), False, 5.0) == torch.tensor([-5.0, 5.0, 0.0])).all()
assert (maybe_normalize_advantages(torch.zeros(4), True, 5.0) == 0).all(), "a constant batch normalises to zeros"
_n = maybe_normalize_advantages(torch.tensor([0.0, 0.0, 0.0, 100.0]), True, 1.0)
assert _n.max().item() == 1.0 and _n.min().item() > -1.0, "normalise first, then clip"
### END HIDDEN TESTS

# %% [markdown]
# ## Part 4: the two updates
#
# ### Task 7: GR-REINFORCE
#
# One on-policy gradient pass. Each completion's log-probability is averaged over its own real tokens
# (length normalisation: a long completion does not count more than a short one), weighted by its
# advantage, and averaged over the rows:
#
# $$L(\theta) = -\frac1B \sum_i A_i \, \frac{1}{|y_i|} \sum_{t \in y_i} \log \pi_\theta(y_{i,t})
# \;+\; \beta\, \widehat{\mathrm{KL}}$$
#
# with $\widehat{\mathrm{KL}}$ from your task 3. A completion with no real token (possible in
# principle) contributes 0; guard the division. Minimising $L$ raises the probability of completions
# that beat their group.


# %% nbgrader={"grade": false, "grade_id": "task7_reinforce_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def reinforce_loss(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                   advantages: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """GR-REINFORCE loss (scalar).

    logprobs:     float [B, T-1], log pi_theta of the sampled tokens, with gradient
    ref_logprobs: float [B, T-1], log pi_ref, no gradient
    mask:         bool  [B, T-1], real completion tokens
    advantages:   float [B]
    kl_coef:      float beta >= 0
    """
    ### BEGIN SOLUTION
    n_tokens = mask.sum(dim=1).clamp(min=1)  # [B]
    seq_logprob = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n_tokens  # [B]
    pg = -(advantages * seq_logprob).mean()
    return pg + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task7_reinforce_loss", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_adv = torch.tensor([1.0, -1.0])
_loss = reinforce_loss(_lp, _lp, _mk, _adv, 0.0)
assert _loss.ndim == 0, "expected a scalar loss"
# row 0: mean(-1, -3) = -2, times +1; row 1: -2, times -1  ->  -(-2 + 2) / 2 = 0
assert abs(_loss.item()) < 1e-6, f"expected 0.0, got {_loss.item()}"
print("visible tests for task 7 passed")

### BEGIN HIDDEN TESTS
_loss = reinforce_loss(_lp, _lp, _mk, torch.tensor([1.0, 0.5]), 0.0)
assert abs(_loss.item() - (-(1.0 * -2.0 + 0.5 * -2.0) / 2)) < 1e-6, "length-normalised per sequence, then mean over rows"
# Padding holding -inf must not matter.
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(reinforce_loss(_lpi, _lp, _mk, _adv, 0.1)), "padding log-probs may be -inf: use torch.where"
# The KL term: kl_coef times your estimator.
_ref = _lp - 0.5
_d = reinforce_loss(_lp, _ref, _mk, _adv, 0.2) - reinforce_loss(_lp, _ref, _mk, _adv, 0.0)
assert abs(_d.item() - 0.2 * approx_kl_from_logprobs(_lp, _ref, _mk).item()) < 1e-6, "add kl_coef * approx KL"
# Gradient: positive advantage pushes the row's log-probs up, padding gets nothing.
_x = _lp.clone().requires_grad_(True)
reinforce_loss(_x, _lp, _mk, torch.tensor([2.0, 0.0]), 0.0).backward()
assert torch.allclose(_x.grad, torch.tensor([[-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])), f"gradient {_x.grad}"
# A row with no real token contributes 0 instead of nan.
assert torch.isfinite(reinforce_loss(_lp, _lp, torch.tensor([[True, True, False], [False, False, False]]), _adv, 0.0))
### END HIDDEN TESTS

# %% [markdown]
# ### Task 8: GRPO
#
# GRPO reuses one batch of rollouts for several epochs. After the first optimizer step the policy
# has moved, so each token's log-prob is compared with the log-prob it had when it was sampled,
# `old_logprobs`, through the ratio $\rho_{i,t} = \exp(\log\pi_\theta - \log\pi_{\text{old}})$, and the
# PPO objective keeps the update inside a trust region:
#
# $$L(\theta) = -\frac1B \sum_i \frac{1}{|y_i|} \sum_{t \in y_i}
#   \min\big(\rho_{i,t} A_i,\ \operatorname{clip}(\rho_{i,t}, 1-\epsilon, 1+\epsilon)\, A_i\big)
#   \;+\; \beta\, \widehat{\mathrm{KL}}$$
#
# Average per sequence first (over its real tokens), then over the rows, exactly as in task 7.
# Once a token's ratio has left the interval in the direction its advantage pushes, the `min` picks
# the clipped, constant branch and that token stops contributing gradient.


# %% nbgrader={"grade": false, "grade_id": "task8_grpo_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
              advantages: torch.Tensor, clip_eps: float, kl_coef: float) -> torch.Tensor:
    """GRPO clipped-surrogate loss (scalar).

    logprobs:     float [B, T-1], log pi_theta, with gradient
    old_logprobs: float [B, T-1], log pi_old at sampling time, no gradient
    ref_logprobs: float [B, T-1], log pi_ref, no gradient
    mask:         bool  [B, T-1]
    advantages:   float [B]
    clip_eps:     float epsilon > 0;  kl_coef: float beta >= 0
    """
    ### BEGIN SOLUTION
    zeros = torch.zeros_like(logprobs)
    ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, zeros))  # [B, T-1]
    adv = advantages[:, None]                                             # [B, 1]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    per_seq = torch.where(mask, surrogate, zeros).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [B]
    return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_adv = torch.tensor([1.0, -0.5])
_loss = grpo_loss(_lp, _lp, _lp, _mk, _adv, 0.2, 0.0)
assert _loss.ndim == 0, "expected a scalar loss"
# On-policy (ratio 1 everywhere): -(1.0 - 0.5) / 2
assert abs(_loss.item() + 0.25) < 1e-6, f"expected -0.25 at ratio 1, got {_loss.item()}"
print("visible tests for task 8 passed")

### BEGIN HIDDEN TESTS
# Ratios: row 0 token 0 at 1.5 (A > 0: clipped to 1.2), token 1 at 0.5 (A > 0: min keeps 0.5).
_old = _lp - torch.tensor([[math.log(1.5), math.log(0.5), 0.0], [math.log(0.5), 0.0, 0.0]])
_loss = grpo_loss(_lp, _old, _lp, _mk, torch.tensor([1.0, -1.0]), 0.2, 0.0)
# row 0: mean(1.2, 0.5) = 0.85; row 1: A < 0, ratio 0.5 -> min(-0.5, -0.8) = -0.8
assert abs(_loss.item() - (-(0.85 - 0.8) / 2)) < 1e-5, f"clipped surrogate, per-sequence mean: got {_loss.item()}"
# Gradients: clipped tokens get none, the others do; padding never.
_x = _lp.clone().requires_grad_(True)
grpo_loss(_x, _old, _lp, _mk, torch.tensor([1.0, -1.0]), 0.2, 0.0).backward()
assert _x.grad[0, 0] == 0 and _x.grad[1, 0] == 0, "tokens outside the trust region in the advantage's direction get no gradient"
assert _x.grad[0, 1] != 0 and (_x.grad[~_mk] == 0).all()
# Sequence-level averaging, not one mean over all tokens of the batch.
_lp2 = torch.zeros(2, 4)
_mk2 = torch.tensor([[True, True, True, True], [True, False, False, False]])
_l = grpo_loss(_lp2, _lp2, _lp2, _mk2, torch.tensor([1.0, -1.0]), 0.2, 0.0)
assert abs(_l.item()) < 1e-6, f"average per sequence, then over rows (expected 0, got {_l.item()})"
# -inf padding, and the KL term.
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(grpo_loss(_lpi, _lpi, _lpi, _mk, _adv, 0.2, 0.1))
_ref = _lp - 0.3
_d = grpo_loss(_lp, _lp, _ref, _mk, _adv, 0.2, 0.5) - grpo_loss(_lp, _lp, _ref, _mk, _adv, 0.2, 0.0)
assert abs(_d.item() - 0.5 * approx_kl_from_logprobs(_lp, _ref, _mk).item()) < 1e-6
# At ratio 1 the GRPO gradient equals the GR-REINFORCE gradient.
_x1 = _lp.clone().requires_grad_(True)
_x2 = _lp.clone().requires_grad_(True)
grpo_loss(_x1, _lp, _lp, _mk, _adv, 0.2, 0.0).backward()
reinforce_loss(_x2, _lp, _mk, _adv, 0.0).backward()
assert torch.allclose(_x1.grad, _x2.grad, atol=1e-6)
### END HIDDEN TESTS

# %% [markdown]
# ## Part 5: experiments
#
# Your eight functions now go into the trainer of `llmrl.hw4` as they are. The same runs exist as
# fixed commands (run from the repository root; they take your notebook with `--impl`):
#
# ```
# python -m llmrl.hw4 train --task format_copy --algo grpo      --impl release/hw4/llm_rl.ipynb
# python -m llmrl.hw4 train --task format_copy --algo reinforce --impl release/hw4/llm_rl.ipynb
# python -m llmrl.hw4 train --task math_toy    --algo grpo      --impl release/hw4/llm_rl.ipynb
# python -m llmrl.hw4 train --task math_toy    --algo reinforce --impl release/hw4/llm_rl.ipynb
# ```
#
# Each writes one JSON line per step to `artifacts/hw4/runs/<task>-<algo>-seed0/metrics.jsonl`
# (add `--wandb` to also log to Weights & Biases, offline by default), checkpoints every 10 steps,
# and continues where it stopped when you rerun it. The cells below run the same configurations
# from here, with your functions as they are defined in this kernel. The first cell loads the base
# model (the first time on a machine, it pretrains it: a few minutes).
#
# Debug on `format_copy` first: if your functions are right, its reward jumps within the first
# 10 to 20 steps and ends near 1.3. A run that stays flat points to the mask, the shift or the
# sign of the advantage.

# %%
from llmrl.hw4 import plots
from llmrl.hw4.impl import Impl
from llmrl.hw4.trainer import default_config, read_jsonl, train

IMPL = Impl.from_namespace(globals(), source="this notebook")
RUNS = "artifacts/hw4/runs"  # relative to this notebook's folder
SHORT = grading_mode()  # under the autograder the runs shrink to one step


def run(task, algo, **overrides):
    """One run with this notebook's functions; returns the per-step records."""
    if SHORT:
        overrides.update(steps=1, eval_limit=4)
    cfg = default_config(task, algo, **overrides)
    res = train(cfg, IMPL, run_dir=f"{RUNS}/{task}-{algo}-seed{cfg.seed}", resume=False, progress=False)
    return res.records


# %% tags=["nbval-ignore-output"]
from llmrl.hw4.char_backend import make_backend

print(make_backend("char", progress=True).describe())  # builds the cached base model on first use

# %% [markdown]
# ### The format_copy runs

# %%
torch.manual_seed(0)
fc = {algo: run("format_copy", algo) for algo in ("grpo", "reinforce")}
for algo, recs in fc.items():
    print(f"format_copy {algo:9s}: eval exact match {recs[0]['eval_exact_match']:.3f} -> "
          f"{[r for r in recs if 'eval_exact_match' in r][-1]['eval_exact_match']:.3f}, "
          f"final rollout reward {recs[-1]['reward_mean']:.3f}")
print("expected:", {k: v for k, v in EXPECTED.items() if k.startswith("format")})

# %%
fig = plots.plot_runs({f"format_copy {a}": r for a, r in fc.items()}, path="artifacts/hw4/format_copy.png")
plt.show()

# %% [markdown]
# Read the completions the policy actually wrote, next to their rewards and the advantages they
# received. The first sampled group and a late one are shown for the GRPO run:

# %%
_gens = read_jsonl(f"{RUNS}/format_copy-grpo-seed0/generations.jsonl")
print(plots.format_generations(_gens, steps=(_gens[0]["step"], _gens[-1]["step"])))

# %% [markdown]
# ### The math runs
#
# Same settings for both algorithms (batch, minibatch, learning rate); the one difference is that
# GRPO makes two clipped passes over every batch. Compare them on the greedy eval of held-out
# problems, the smoother curve.

# %%
torch.manual_seed(0)
mt = {algo: run("math_toy", algo) for algo in ("grpo", "reinforce")}
for algo, recs in mt.items():
    print(f"math_toy {algo:9s}: eval exact match {recs[0]['eval_exact_match']:.3f} -> "
          f"{[r for r in recs if 'eval_exact_match' in r][-1]['eval_exact_match']:.3f}")
print("expected:", {k: v for k, v in EXPECTED.items() if k.startswith("math")})

# %%
fig = plots.plot_runs({f"math_toy {a}": r for a, r in mt.items()}, path="artifacts/hw4/math_toy.png")
plt.show()

# %%
_gens = read_jsonl(f"{RUNS}/math_toy-grpo-seed0/generations.jsonl")
print(plots.format_generations(_gens, steps=(_gens[0]["step"], _gens[-1]["step"])))

# %% [markdown]
# ### Ablation: how far can GRPO's knobs go?
#
# Starting from the format_copy GRPO run, change one setting at a time: more epochs over each
# batch, smaller minibatches (more optimizer steps per batch; `6x1` means minibatches of 6 rows and
# no gradient accumulation), a weaker or stronger KL penalty, a narrower or wider clip range.
# The full study walks each axis outwards until a run degrades:
# `python -m llmrl.hw4 sweep --impl release/hw4/llm_rl.ipynb` (a few minutes per axis). Here, a short
# version with one extreme value per axis, 20 steps per run. A run counts as degraded when its final
# eval exact match falls 0.15 below the default run's, or its final reward 0.2 below.

# %%
from llmrl.hw4.ablation import plot_sweep, sweep

torch.manual_seed(0)
_axes = {"ppo_epochs": [2, 16], "minibatch": [(24, 2), (3, 1)], "kl_coef": [0.05, 8.0], "clip_eps": [0.2, 0.02]}
_base = default_config("format_copy", "grpo", steps=20)
if SHORT:  # under the autograder: one axis, one step
    _axes, _base = {"kl_coef": [0.05, 8.0]}, default_config("format_copy", "grpo", steps=1, eval_limit=4)
ablation = sweep(IMPL, "artifacts/hw4/ablation-notebook", _base, _axes, progress=False, fresh=True)
for _r in ablation:
    print(f"{_r['axis']:>10} = {_r['label']:>5}: eval exact match {_r['final_eval_exact_match']:.3f}, "
          f"mean clip fraction {_r['mean_clip_fraction']:.3f}, max KL {_r['max_kl']:.3f}"
          + ("  <- degraded" if _r["degraded"] else ""))

# %%
fig = plot_sweep(ablation, path="artifacts/hw4/ablation.png")
plt.show()

# %% [markdown]
# ## Part 6: report
#
# Answer in a few sentences each, in your own words, citing your own plots and numbers.
#
# **Question 1 (the KL estimator).** Why is $\hat k = e^{\Delta} - \Delta - 1$, with
# $\Delta = \log \pi_{\text{ref}}(y) - \log \pi_\theta(y)$ and $y \sim \pi_\theta$, an unbiased
# estimate of $\mathrm{KL}(\pi_\theta \| \pi_{\text{ref}})$, and why is it never negative for a
# single token? What would go wrong with the plain estimate $-\Delta$ as a penalty?

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q1_kl_estimator", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Unbiased: under $y \sim \pi_\theta$, $\mathbb E[e^{\Delta}] = \sum_y \pi_\theta(y) \frac{\pi_{\text{ref}}(y)}{\pi_\theta(y)} = 1$,
# so $\mathbb E[e^\Delta - 1] = 0$ and $\mathbb E[\hat k] = \mathbb E[-\Delta] = \mathbb E[\log \pi_\theta - \log \pi_{\text{ref}}]$, which is the KL.
# Nonnegative: $e^x \ge 1 + x$ for every real $x$ (the exponential lies above its tangent at 0), so each
# sample is $\ge 0$ and is 0 only where the two policies agree on that token. The plain $-\Delta$ has the
# same mean but is negative on every token the reference likes more than the policy, so a single
# batch can report a negative KL and the penalty's gradient has high variance; $\hat k$ adds a
# zero-mean control variate that cancels much of it.
# ### END SOLUTION

# %% [markdown]
# **Question 2 (implementation order and one bug).** In which order did you implement and test the
# eight functions, and why that order? Describe one bug you had (or one the tests caught), the
# symptom you saw, and how you found it.

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q2_order_and_bug", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Data-flow order: log-probs, mask and KL first (every loss consumes them), then minibatches, then
# group advantages (both algorithms need them), then REINFORCE (the simplest update, which checks the
# whole pipeline on format_copy), then GRPO (which at ratio 1 must reproduce REINFORCE's gradient).
# Example bug: a completion mask built from the input columns instead of the target columns drops
# the first completion token and scores the token after EOS; format_copy then learns the tag but
# keeps writing text after it (the clean bonus never comes), which the hand-made mask table exposes.
# ### END SOLUTION

# %% [markdown]
# **Question 3 (the math comparison).** Compare GR-REINFORCE and GRPO on the math task: eval curves,
# rollout reward, KL and clip fraction. Which is more sample-efficient over these steps, and why?
# What did each cost in time?

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q3_math_comparison", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# With the same rollouts per step, GRPO's second clipped epoch gives two optimizer steps per batch,
# so its held-out eval rises faster and ends higher than GR-REINFORCE's, which in turn ends above the
# base model. The price is a larger KL to the reference and a nonzero clip fraction in the second
# epoch (REINFORCE's ratio is always 1, so it never clips), and about one extra forward/backward
# pass per step; sampling dominates the step time, so GRPO costs far less than twice as much.
# ### END SOLUTION

# %% [markdown]
# **Question 4 (the ablation).** Summarise your ablation: for each knob, which direction degraded the
# run, at what value, and what the curves (reward, KL, clip fraction) showed when it did.

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q4_ablation", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Many epochs or tiny minibatches take many optimizer steps per batch: the policy leaves the
# trust region, the clip fraction rises, and with too many steps the run becomes unstable.
# A very strong KL penalty holds the policy at the base model's sloppy format, so the reward never
# jumps; no penalty at all works on this short task. A tiny clip range removes most of the
# gradient in later epochs and slows learning; a huge one turns GRPO into unclipped
# sample reuse, fine for two epochs, risky for many.
# ### END SOLUTION

# %% [markdown]
# **Question 5 (generations).** Quote one or two sampled completions from your runs, with their reward
# and advantage, that taught you something about the run (a reward hack, a format the policy
# settled on, a group with zero advantage everywhere, ...). What did they show?

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q5_generations", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Early format_copy groups mix "Answer: N" (reward 0, advantage about -1) with the tagged copy
# (1.3, advantage above +1): the advantage sign alone says which format to reinforce. Late groups
# are all "<answer>N</answer>" with reward 1.3 and advantage 0: such groups no longer produce any
# gradient, which is why the reward curve flattens once the task is solved.
# ### END SOLUTION
