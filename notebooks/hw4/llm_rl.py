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
# > **Before you start.** 37 points: 24 for the eight functions (graded automatically) and 13 for
# > the report (graded by hand). Plan on about 4 hours for the functions and 2 for the report; the
# > training runs of Part 5 (each with three seeds) take about 3 minutes on a laptop CPU (the base
# > model comes pretrained with the course library).
# >
# > | task | you write | points | about |
# > |---|---|---|---|
# > | 1 | `compute_per_token_logprobs`: the shift, in float32 | 3 | 20 min |
# > | 2 | `build_completion_mask`: which scored tokens are completion | 3 | 20 min |
# > | 3 | `approx_kl_from_logprobs`: the k3 KL estimate, clamped, masked | 3 | 20 min |
# > | 4 | `iter_minibatches`: aligned, shuffled minibatches | 3 | 25 min |
# > | 5 | `compute_group_advantages`: standardised within each group | 3 | 25 min |
# > | 6 | `maybe_normalize_advantages`: batch normalisation, then the clip | 2 | 15 min |
# > | 7 | `reinforce_loss`: GR-REINFORCE | 3 | 30 min |
# > | 8 | `grpo_loss`: the clipped surrogate | 4 | 40 min |
# > | report | Questions 1 to 5 (3, 2, 3, 3 and 2 points) | 13 | 2 h |
# >
# > **Testing one task.** Run the first code cell (the imports) once. Then run the task's cell and
# > the test cell right below it (Shift+Enter on each); after every change, run both again. Tasks 7
# > and 8 call your Task 3, so do the tasks in order.
# >
# > **Done** means: every test cell prints `visible tests for task ... passed`; the check after the
# > format_copy runs says their reward got where a correct solution gets (if not, it names the
# > tasks to look at); your report cites your own plots and numbers. The grader runs further tests
# > in the same cells (bf16 and very peaked logits, `-inf` padding, batches that do not divide,
# > shuffled minibatches), so a visible pass is necessary, not sufficient. The cell above each
# > report answer says what the grader looks for.
#
# In this homework you write the algorithmic core of outcome-reward RL for language models and then
# use it to train a policy twice: once with **GR-REINFORCE** (group-relative advantages, one
# on-policy gradient pass per batch of rollouts) and once with **GRPO** (the same advantages, but each
# batch reused for several epochs under a clipped importance ratio).
#
# The setting. A prompt $x$ is answered by a completion $y = (y_1, \dots, y_T)$ sampled token by token
# from the policy $\pi_\theta$. A program checks the completion and returns a reward $r(x, y)$.
# Each prompt gets $G$ completions, a **group**, and they are judged against one another:
#
# $$A_{i,j} = \frac{r_{i,j} - \operatorname{mean}_j r_{i,j}}{\operatorname{std}_j r_{i,j} + 10^{-6}}$$
#
# (prompt $i$, sample $j$). A KL penalty ties the policy to a frozen copy of the starting model,
# $\pi_{\text{ref}}$, so that it cannot wander arbitrarily far.
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
# **Read the code first.** Before you write a line, follow one training step through the library
# in the order the data moves, and answer for yourself: where are the prompts sampled and scored
# (`llmrl.hw4.tasks`: `FormatCopyTask`, `MathToyTask`, `score`)? In what order does the trainer call
# your eight functions, and how often per batch (`llmrl.hw4.trainer.train`)? How do your functions
# get from this notebook into the trainer (`llmrl.hw4.impl.Impl`)? **What you should find:** you can
# name, for each of your functions, the tensors it receives and who uses its result. `import
# inspect; print(inspect.getsource(...))` shows any of them here.
#
# Shapes: `B` rows (prompts times group size, rows of one prompt adjacent), `T` token columns
# (prompt, then completion), `V` vocabulary. A rollout batch is left-padded to a common prompt width
# `P`, so completion tokens sit at columns `P .. T-1`; `attention_mask` is 1 on real tokens (prompt
# characters, completion characters and the end-of-sequence token) and 0 on padding.

# %%
import math

import matplotlib.pyplot as plt
import torch

from llmrl import live_checks
from llmrl.utils import grading_mode, set_threads

set_threads(1)  # one thread: reproducible, and the fastest at this size

# What a correct solution shows with the default runs on the character model (measured here,
# the mean over seeds 0, 1 and 2, so expect a few points either way); the published numbers, for
# a 1.5B model on real MATH problems, are in the comments.
EXPECTED = {
    "format_copy_final_reward": 1.25,            # published: about 1.27-1.3 (here GRPO 1.27, GR-REINFORCE 1.22)
    "format_copy_final_eval_exact_match": 1.0,   # published: 64/64 (materially below 0.8 means a bug)
    "format_copy_reward_jump_step": 10,          # published: the reward jumps around step 10
    "math_base_eval": 0.27,                      # published (MATH level 5): 0.23-0.26 before RL
    "math_reinforce_eval": 0.99,                 # published: about 0.31 (GR-REINFORCE, MATH)
    "math_grpo_eval": 0.98,                      # published: above 0.37 (GRPO, MATH)
    "math_step10_grpo_ahead": True,              # GRPO's eval at step 10 above GR-REINFORCE's (0.95 against 0.47)
    "math_grpo_minus_reinforce_eval_area": 0.15,  # published: GRPO the more sample-efficient (0.33 against 0.30)
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
# A hand example where each logits column favours a different token. Row c of `_probs` is what
# logits column c predicts; column c scores the token in column c + 1.
_probs = torch.tensor([[0.7, 0.2, 0.1],    # column 0 predicts column 1 (token 2 -> 0.1)
                       [0.1, 0.8, 0.1],    # column 1 predicts column 2 (token 0 -> 0.1)
                       [0.25, 0.25, 0.5],  # column 2 predicts column 3 (token 2 -> 0.5)
                       [0.3, 0.3, 0.4]])   # column 3 predicts nothing
_lg = (_probs.log() + torch.tensor([[0.3], [-1.0], [2.0], [0.0]])).unsqueeze(0)
_out = compute_per_token_logprobs(_lg, torch.tensor([[2, 2, 0, 2]]))
_p = [round(x, 3) for x in _out.exp().flatten().tolist()]
assert not torch.allclose(_out.exp(), torch.tensor([[0.1, 0.25, 0.4]]), atol=1e-4), (
    f"hand example: got probabilities {_p}, the logits of each token's OWN column. Column t of the logits "
    "scores input_ids[:, t + 1]: use logits[:, :-1] against input_ids[:, 1:]")
assert torch.allclose(_out.exp(), torch.tensor([[0.1, 0.1, 0.5]]), atol=1e-5), (
    f"hand example: expected probabilities [0.1, 0.1, 0.5], got {_p}: column t of the logits scores the token "
    "in column t + 1, picked with torch.gather")
# bf16 logits, as a real model hands them over, come back as float32.
_out = compute_per_token_logprobs(_logits.bfloat16(), _ids)
assert _out.dtype == torch.float32, f"bf16 logits gave {_out.dtype}: cast to float32 (logits.float()) BEFORE log_softmax"
print("visible tests for task 1 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(1)
# Against a loop.
_lg = torch.randn(3, 6, 5, generator=_g)
_ids = torch.randint(0, 5, (3, 6), generator=_g)
_want = torch.tensor([[torch.log_softmax(_lg[b, t], -1)[_ids[b, t + 1]].item() for t in range(5)] for b in range(3)])
assert torch.allclose(compute_per_token_logprobs(_lg, _ids), _want, atol=1e-5)
# bf16 logits: the log-softmax itself runs in float32 (a bf16 log_softmax is off by up to ~0.03).
_lg16 = (torch.randn(2, 6, 50, generator=_g) * 4).bfloat16()
_ids = torch.randint(0, 50, (2, 6), generator=_g)
_want = torch.log_softmax(_lg16.float()[:, :-1], -1).gather(-1, _ids[:, 1:, None])[..., 0]
assert torch.allclose(compute_per_token_logprobs(_lg16, _ids), _want, atol=1e-5), "compute the log_softmax in float32"
# float32, peaked: a token with probability about e^-150 (below the smallest float32) gets about -150, not -inf.
_lg = torch.zeros(1, 3, 4)
_lg[0, :, 0] = 150.0
_out = compute_per_token_logprobs(_lg, torch.tensor([[0, 3, 1]]))
assert torch.isfinite(_out).all() and torch.allclose(_out, torch.full((1, 2), -150.0), atol=1e-3), (
    f"an unlikely token got {_out.tolist()}: use torch.log_softmax, not log(softmax)")
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
_want = (0.5 + math.log(2) - 1) / 2
assert abs(_kl.item() - (2 - math.log(2) - 1) / 2) > 1e-4, (
    "got the value for delta = log pi_theta - log pi_ref: the estimator uses delta = log pi_ref - log pi_theta")
assert abs(_kl.item() - _want) < 1e-6, f"expected {_want:.6f}, got {_kl.item()}"
assert approx_kl_from_logprobs(_lp, _lp, torch.tensor([[True, True]])).item() == 0.0, "identical policies: 0"
# A token the reference finds absurd: delta = 200 would make e^delta overflow to inf.
_big = approx_kl_from_logprobs(torch.tensor([[-200.0]]), torch.tensor([[0.0]]), torch.tensor([[True]]))
assert torch.isfinite(_big), f"got {_big.item()}: clamp delta to [-20, 20] before exponentiating"
# Padding may hold -inf: select with torch.where, because 0 * inf is nan.
_m = torch.tensor([[True, False]])
_pad = approx_kl_from_logprobs(torch.tensor([[-1.0, float("-inf")]]), torch.tensor([[-1.0, float("-inf")]]), _m)
assert torch.isfinite(_pad) and _pad.item() == 0.0, (
    f"padding that holds -inf gave {_pad.item()}: select the real tokens with torch.where(mask, k3, 0) "
    "instead of multiplying by the mask")
print("visible tests for task 3 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(3)
# Nonnegative for every pair; the clamp at exactly +-20 (e^20 - 21 above, e^-20 + 19 below).
_a, _b = torch.randn(4, 6, generator=_g) * 5, torch.randn(4, 6, generator=_g) * 5
assert approx_kl_from_logprobs(_a, _b, torch.ones(4, 6, dtype=torch.bool)) >= 0
_big = approx_kl_from_logprobs(torch.tensor([[-200.0]]), torch.tensor([[0.0]]), torch.tensor([[True]]))
assert abs(_big.item() - (math.exp(20) - 21)) / math.exp(20) < 1e-4, "clamp delta to [-20, 20]"
_low = approx_kl_from_logprobs(torch.tensor([[0.0]]), torch.tensor([[-200.0]]), torch.tensor([[True]]))
assert abs(_low.item() - (math.exp(-20) + 19)) < 1e-4, f"clamp delta to [-20, 20] on the low side too, got {_low.item()}"
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
assert [len(m["ids"]) for m in _mbs] == [4, 4, 2], (
    f"10 rows in minibatches of 4: expected sizes [4, 4, 2] (the last one smaller), got {[len(m['ids']) for m in _mbs]}")
assert torch.equal(torch.cat([m["ids"] for m in _mbs]), torch.arange(10)), "without a generator keep the order"
for _m in _mbs:
    assert set(_m) == set(_batch) and torch.equal(_m["adv"], _m["ids"] * 10.0)


def _aligned(mb):
    return torch.equal(mb["adv"], mb["ids"] * 10.0) and torch.equal(mb["lp"], torch.stack([2 * mb["ids"], 2 * mb["ids"] + 1], 1))


# With a generator: a shuffled order, and every field of a minibatch still holds the same rows.
_mbs = list(iter_minibatches(_batch, 4, torch.Generator().manual_seed(3)))
_seen = torch.cat([m["ids"] for m in _mbs])
assert not torch.equal(_seen, torch.arange(10)), (
    "with a generator the rows must come in a shuffled order: index every field with "
    "torch.randperm(n, generator=generator)")
assert all(_aligned(m) for m in _mbs), ("the fields of a minibatch hold different rows: draw ONE permutation and "
                                        "index every field with the same row indices")
# Fields with different row counts are a bug in the caller.
try:
    list(iter_minibatches({"a": torch.zeros(3), "b": torch.zeros(4)}, 2))
except ValueError:
    pass
else:
    raise AssertionError("fields with 3 and 4 rows must raise ValueError (before yielding anything)")
print("visible tests for task 4 passed")

### BEGIN HIDDEN TESTS
# Every row exactly once per pass, also when the minibatch size does not divide the batch.
_mbs = list(iter_minibatches(_batch, 3, torch.Generator().manual_seed(3)))
assert [len(m["ids"]) for m in _mbs] == [3, 3, 3, 1]
assert sorted(torch.cat([m["ids"] for m in _mbs]).tolist()) == list(range(10)), "every row exactly once per pass"
assert all(_aligned(_mb) for _mb in _mbs), "size 3 with a generator: the fields of a minibatch must hold the same rows"
# The same generator seed gives the same order; another seed another order.
_order = lambda seed: [m["ids"].tolist() for m in iter_minibatches(_batch, 3, torch.Generator().manual_seed(seed))]
assert _order(5) == _order(5), "the same generator seed gives the same order"
assert _order(5) != _order(6), "another seed should give another order"
# One minibatch when it is larger than the batch; a batch of one row.
assert len(list(iter_minibatches(_batch, 100))) == 1
assert [len(m["ids"]) for m in iter_minibatches({"ids": torch.arange(1)}, 4)] == [1]
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

    rewards:    float [B], B a multiple of group_size (raise an error otherwise)
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
assert not torch.allclose(_adv, torch.tensor([0.7071, -0.7071, 0.7071, -0.7071]), atol=1e-3), (
    "got +-0.707: that is the sample standard deviation; use the population std, std(unbiased=False)")
assert torch.allclose(_adv, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-5), f"got {_adv}"
# Two groups on different scales: each group is standardised with its own mean and std.
_adv = compute_group_advantages(torch.tensor([0.0, 0.1, 0.2, 10.0, 20.0, 30.0]), 3)
assert torch.allclose(_adv, torch.tensor([-1.2247, 0.0, 1.2247, -1.2247, 0.0, 1.2247]), atol=1e-3), (
    f"got {_adv}: reshape to [B / G, G] first, then standardise each row with its own mean and std")
# A group in which every sample got the same reward: exactly 0 (float32 rounding turns it into ~0.01).
_adv = compute_group_advantages(torch.full((8,), 0.1), 8)
assert _adv.dtype == torch.float32, f"return float32, got {_adv.dtype}"
assert (_adv.abs() < 1e-6).all(), (
    f"a constant group gave {_adv[0].item():.2e} instead of 0: do the arithmetic in float64 (rewards.double()), "
    "then return float32")
print("visible tests for task 5 passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(5)
# Other constant groups next to normal ones: zeros, no nan.
_adv = compute_group_advantages(torch.tensor([1.3, 1.3, 1.3, 0.0, 1.3, 0.2]), 3)
assert torch.isfinite(_adv).all() and (_adv[:3].abs() < 1e-6).all(), f"zero-std group must give zeros, got {_adv}"
# Against a loop, G = 4.
_r = torch.rand(12, generator=_g)
_want = torch.cat([(_r[i:i + 4] - _r[i:i + 4].mean()) / (_r[i:i + 4].std(unbiased=False) + 1e-6) for i in range(0, 12, 4)])
assert torch.allclose(compute_group_advantages(_r, 4), _want, atol=1e-5)
# G = 1: every advantage is zero.
assert (compute_group_advantages(torch.tensor([0.3, 1.0]), 1) == 0).all()
# A batch that does not divide into groups is an error, never a silently wrong grouping.
try:
    compute_group_advantages(torch.rand(10, generator=_g), 4)
except (ValueError, RuntimeError):
    pass
else:
    raise AssertionError("10 rewards cannot form groups of 4: raise an error")
### END HIDDEN TESTS

# %% [markdown]
# ### Task 6: optional batch normalisation and clipping
#
# Some runs standardise the advantages once more over the whole batch; the required runs do not
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
# The input tensor is the caller's: it must come back unchanged.
_n = maybe_normalize_advantages(_a, True, None)
assert torch.equal(_a, torch.tensor([1.0, 2.0, 3.0, 10.0])), (
    f"the input changed to {_a}: in-place operations (-=, /=, .sub_) modify the caller's tensor; compute a new one")
_a = torch.tensor([1.0, 2.0, 3.0, 10.0])
# Normalise first, then clip: the outlier 100 is clipped to 1 only after standardising.
_n = maybe_normalize_advantages(torch.tensor([0.0, 0.0, 0.0, 100.0]), True, 1.0)
assert abs(_n.max().item() - 1.0) < 1e-6 and _n.min().item() > -1.0, (
    f"got {_n}: normalise with the batch mean and std first, then clamp to [-clip, clip]")
print("visible tests for task 6 passed")

### BEGIN HIDDEN TESTS
# The batch statistics: mean 0 and population std 1 (the sample std gives std 0.87 here).
_n = maybe_normalize_advantages(_a, True, None)
assert abs(_n.mean().item()) < 1e-5 and abs(_n.std(unbiased=False).item() - 1) < 1e-4, "batch mean 0, population std 1"
assert (maybe_normalize_advantages(torch.tensor([-9.0, 9.0, 0.0]), False, 5.0) == torch.tensor([-5.0, 5.0, 0.0])).all()
assert (maybe_normalize_advantages(torch.zeros(4), True, 5.0) == 0).all(), "a constant batch normalises to zeros"
_out = maybe_normalize_advantages(_a, False, None)
_out += 1
assert torch.equal(_a, torch.tensor([1.0, 2.0, 3.0, 10.0])), "return a new tensor, not the input itself"
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
assert abs(_loss.item()) < 1e-6, (
    f"expected 0.0, got {_loss.item()}: each row's log-prob is the MEAN over its real tokens, times its advantage; "
    "then the mean over rows")
# Length normalisation: row 0's log-prob is the MEAN over its 2 real tokens (-2), not their sum (-4).
_loss = reinforce_loss(_lp, _lp, _mk, torch.tensor([1.0, 0.5]), 0.0).item()
assert abs(_loss - 2.5) > 1e-4, ("got 2.5: each completion's log-prob must be averaged over its own real tokens "
                                 "(sum over the mask / mask.sum(1)), not summed")
assert abs(_loss - 1.5) < 1e-6, f"expected -(1.0 * -2 + 0.5 * -2) / 2 = 1.5, got {_loss}"
# The KL term: kl_coef times your approx_kl_from_logprobs.
_ref = _lp - 0.5
_d = reinforce_loss(_lp, _ref, _mk, _adv, 0.2) - reinforce_loss(_lp, _ref, _mk, _adv, 0.0)
assert abs(_d.item() - 0.2 * approx_kl_from_logprobs(_lp, _ref, _mk).item()) < 1e-6, (
    f"kl_coef = 0.2 changed the loss by {_d.item():.5f}: add kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)")
# Padding holding -inf must not matter.
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(reinforce_loss(_lpi, _lp, _mk, _adv, 0.1)), (
    "padding log-probs may be -inf and 0 * inf is nan: select the real tokens with torch.where(mask, logprobs, 0)")
print("visible tests for task 7 passed")

### BEGIN HIDDEN TESTS
# Gradient: positive advantage pushes the row's log-probs up (-A / |y| per token), padding gets nothing.
_x = _lp.clone().requires_grad_(True)
reinforce_loss(_x, _lp, _mk, torch.tensor([2.0, 0.0]), 0.0).backward()
assert torch.allclose(_x.grad, torch.tensor([[-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])), f"gradient {_x.grad}"
# -inf padding: a finite gradient too.
_x = _lpi.clone().requires_grad_(True)
reinforce_loss(_x, _lp, _mk, _adv, 0.0).backward()
assert torch.isfinite(_x.grad).all() and (_x.grad[~_mk] == 0).all(), f"-inf padding gave the gradient {_x.grad}"
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
assert abs(_loss.item() + 0.25) < 1e-6, (
    f"expected -0.25 at ratio 1, got {_loss.item()}: average each row's surrogate over its own real tokens, then "
    "average the rows")
# Off-policy: row 0 token 0 at ratio 1.5 (A > 0: clipped to 1.2), token 1 at 0.5 (A > 0: min keeps 0.5);
# row 1 at ratio 0.5 with A < 0: min(-0.5, -0.8) = -0.8. Loss: -(mean(1.2, 0.5) - 0.8) / 2.
_old = _lp - torch.tensor([[math.log(1.5), math.log(0.5), 0.0], [math.log(0.5), 0.0, 0.0]])
_loss = grpo_loss(_lp, _old, _lp, _mk, torch.tensor([1.0, -1.0]), 0.2, 0.0).item()
_want = -(0.85 - 0.8) / 2
assert abs(_loss + 0.25) > 1e-4, ("got -0.25, the unclipped surrogate (max of the two branches gives the same here): "
                                  "take min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) per token")
assert abs(_loss + 0.1) > 1e-4, ("got -0.1, the clipped branch alone: take the minimum of the clipped and the "
                                 "unclipped branch, so a ratio below the interval with A > 0 still counts as 0.5")
assert abs(_loss + 0.325) > 1e-4, ("got -0.325: max of the two branches instead of min (the clipped objective is the "
                                   "pessimistic one)")
assert abs(_loss - _want) < 1e-5, f"clipped surrogate, per-sequence mean: expected {_want}, got {_loss}"
# Average per sequence first, then over rows: row 0 has 4 real tokens (A = 1), row 1 one (A = -1) -> 0.
_lp2 = torch.zeros(2, 4)
_mk2 = torch.tensor([[True, True, True, True], [True, False, False, False]])
_l = grpo_loss(_lp2, _lp2, _lp2, _mk2, torch.tensor([1.0, -1.0]), 0.2, 0.0).item()
assert abs(_l) < 1e-6, (f"expected 0, got {_l:.4f}: average each row over its own real tokens, then over the rows "
                        "(a mean over all tokens of the batch gives -0.6)")
print("visible tests for task 8 passed")

### BEGIN HIDDEN TESTS
# Gradients: tokens outside the trust region in their advantage's direction get none, the others do.
_x = _lp.clone().requires_grad_(True)
grpo_loss(_x, _old, _lp, _mk, torch.tensor([1.0, -1.0]), 0.2, 0.0).backward()
assert _x.grad[0, 0] == 0 and _x.grad[1, 0] == 0, "tokens outside the trust region in the advantage's direction get no gradient"
assert abs(_x.grad[0, 1].item() + 0.5 * 0.5 / 2) < 1e-6 and (_x.grad[~_mk] == 0).all(), f"gradient {_x.grad}"
# -inf padding (in log-probs and old log-probs alike): a finite loss, and a finite gradient of the
# clipped surrogate (mask the log-ratio before exp: exp(-inf - -inf) is nan).
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(grpo_loss(_lpi, _lpi, _lpi, _mk, _adv, 0.2, 0.1)), "-inf padding made the loss non-finite"
_x = _lpi.clone().requires_grad_(True)
grpo_loss(_x, _lpi, _lpi, _mk, _adv, 0.2, 0.0).backward()
assert torch.isfinite(_x.grad).all() and (_x.grad[~_mk] == 0).all(), f"-inf padding gave the gradient {_x.grad}"
# The KL term.
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
# (add `--wandb` to also log to Weights & Biases, offline by default; `--seed 1` for another seed),
# checkpoints every 10 steps, and continues where it stopped when you rerun it. The cells below run
# the same configurations from here, with your functions as they are defined in this kernel, each
# with seeds 0, 1 and 2 (one after another): a single run's curve mixes what the algorithm does
# with the luck of its samples, and only the spread over seeds tells the two apart. The tables give
# the mean over the seeds, its standard deviation and every seed's value; the plots draw every seed
# as a thin line and the mean as a thick one. The first cell loads the base model, which comes
# pretrained with the course library.
#
# Debug on `format_copy` first: if your functions are right, its reward jumps within the first
# 10 to 20 steps and ends near 1.3. A run that stays flat points to the mask, the shift or the
# sign of the advantage.
#
# **Where these runs differ from the published ones.** The published results come from a GPU
# version of this homework; the runs here are sized for a laptop CPU, and every setting that differs
# is in this table. The published numbers quoted in this notebook are those of the GPU runs, so
# compare your numbers with the CPU expectations (`EXPECTED` in the first code cell), not with them.
#
# | setting | here (CPU) | published (GPU) | why |
# |---|---|---|---|
# | policy | character model, 110,592 parameters, every weight trained | Qwen2.5-Math-1.5B-Instruct, LoRA adapters (r = 16) | a 1.5B model does not train on a CPU in minutes |
# | learning rate | 5e-5 | 3e-5 | calibrated for the small model that trains all its weights: at 5e-5 format_copy's reward jumps within about 10 steps, as published |
# | format_copy steps | 40 | 51 | the character model has solved the task well before step 40 |
# | math task | `math_toy` (arithmetic questions), 128 held-out problems | MATH level 5, 512 held-out problems | the stand-in keeps the reward's form (boxed answer, shaping) at a size the small model can learn |
# | math steps | 30 for both algorithms | 201 (GR-REINFORCE) and 501 (GRPO) | 30 steps already separate the two algorithms' early learning on `math_toy` |
# | seeds | 0, 1 and 2 for every run | not stated | every number here is a mean over the seeds with its spread |
# | ablation | 20 steps per run, one extreme value per axis, seeds 0, 1 and 2 | format_copy runs, each axis pushed until a run degrades | the full walk is the command-line sweep below |
#
# Everything else is as published: 8 prompts per step with groups of 6 (format_copy) or 8 (math),
# temperature 0.8 and top-p 0.95, clip range 0.2, KL coefficient 0.05 with the k3 estimator, gradient
# norm clipped at 0.5, advantages clipped at 5, two GRPO epochs, AdamW with betas (0.9, 0.95).

# %%
from llmrl.hw4 import plots
from llmrl.hw4.impl import Impl
from llmrl.hw4.trainer import default_config, read_jsonl, train

IMPL = Impl.from_namespace(globals(), source="this notebook")
RUNS = "artifacts/hw4/runs"  # relative to this notebook's folder
SHORT = grading_mode()  # under the autograder the runs shrink to one step and one seed
SEEDS = (0,) if SHORT else (0, 1, 2)  # every run of this part, once per seed (one after another)


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

# %% tags=["nbval-mask-numbers"]
torch.manual_seed(0)
fc = {algo: [run("format_copy", algo, seed=s) for s in SEEDS] for algo in ("grpo", "reinforce")}
print(f"mean ± standard deviation over seeds {', '.join(map(str, SEEDS))} (each seed in brackets)")
for algo, seeds in fc.items():
    _final = [[r for r in recs if "eval_exact_match" in r][-1]["eval_exact_match"] for recs in seeds]
    print(f"format_copy {algo:9s}: eval exact match {seeds[0][0]['eval_exact_match']:.3f} -> "
          f"{plots.seeds_text(_final)}, final rollout reward {plots.seeds_text([recs[-1]['reward_mean'] for recs in seeds])}")
print("expected:", {k: v for k, v in EXPECTED.items() if k.startswith("format")})

# %% tags=["nbval-mask-numbers"]
# A correct set of functions lifts format_copy's reward far above where it starts within these
# steps, with either algorithm; a run that stays low points to the shift, the mask or the
# advantages, and then to the update itself. (0.8: well below the 1.1 to 1.3 that correct functions
# reach on the CPU model, and well above a run that never learned the answer tag.)
if SHORT:
    print("(the autograder's runs are one step long: nothing to compare)")
else:
    for algo, seeds in fc.items():
        _update = "8 (`grpo_loss`)" if algo == "grpo" else "7 (`reinforce_loss`)"
        _ok = live_checks.at_least(f"format_copy {algo}, final rollout reward (mean over seeds)",
                                   sum(recs[-1]["reward_mean"] for recs in seeds) / len(seeds), 0.8,
                                   task=f"Tasks 1 (the shift), 2 (the mask), 5 (the advantages), then {_update}")

# %%
fig = plots.plot_runs({f"format_copy {a}": r for a, r in fc.items()}, path="artifacts/hw4/format_copy.png")
plt.show()

# %% [markdown]
# Read the completions the policy actually wrote, next to their rewards and the advantages they
# received. The first sampled group and a late one are shown for the GRPO run of seed 0:

# %% tags=["nbval-mask-samples"]
_gens = read_jsonl(f"{RUNS}/format_copy-grpo-seed0/generations.jsonl")
print(plots.format_generations(_gens, steps=(_gens[0]["step"], _gens[-1]["step"])))

# %% [markdown]
# ### The math runs
#
# Same settings for both algorithms (batch, minibatch, learning rate); the one difference is that
# GRPO makes two clipped passes over every batch. Compare them on the greedy eval of held-out
# problems, the smoother curve.
#
# **Which algorithm is the more sample-efficient?** Both draw the same 64 rollouts per step, so an
# eval curve over steps is a curve over samples, and "more sample-efficient" means "higher over the
# budget", not "higher at the end". In the published runs on MATH both algorithms end far from a
# solved task (about 0.30 and 0.33), so the final eval can tell them apart. `math_toy` is easier:
# both algorithms solve it within these 30 steps, and once both sit at the ceiling the final eval
# only says so. The measure used here is therefore the **area under the eval curve**
# (`plots.eval_area`): the eval exact match averaged over the run, between the eval points by the
# trapezoid rule, so a run that gets to the ceiling sooner scores higher. It uses every eval point
# the runs already make and needs no step picked by looking at where the curves level off (the
# eval at one early step would); the steps where both runs are at the ceiling add the same to
# both. The last line below gives GRPO minus GR-REINFORCE per seed, for the area and, for
# comparison, for the final eval.

# %% tags=["nbval-mask-numbers"]
torch.manual_seed(0)
mt = {algo: [run("math_toy", algo, seed=s) for s in SEEDS] for algo in ("grpo", "reinforce")}
print(f"mean ± standard deviation over seeds {', '.join(map(str, SEEDS))} (each seed in brackets)")
_area, _end = {}, {}
for algo, seeds in mt.items():
    _evals = [{r["step"]: r["eval_exact_match"] for r in recs if "eval_exact_match" in r} for recs in seeds]
    _train = [r for recs in seeds for r in recs if "reward_mean" in r]
    _early = min((s for s in _evals[0] if s >= 10), default=max(_evals[0]))
    _area[algo] = [plots.eval_area(recs) for recs in seeds]
    _end[algo] = [e[max(e)] for e in _evals]
    _max_kl = [max(r["kl_to_reference_k3_token_mean_nats"] for r in recs if "reward_mean" in r) for recs in seeds]
    print(f"math_toy {algo:9s}: eval exact match {_evals[0][0]:.3f} -> {plots.seeds_text(_end[algo])} "
          f"({plots.seeds_text([e[_early] for e in _evals])} at step {_early}); "
          f"area under the eval curve {plots.seeds_text(_area[algo])}\n"
          f"{'':20s}max KL {plots.seeds_text(_max_kl, seed_digits=3)}, mean clip fraction "
          f"{sum(r['clip_fraction'] for r in _train) / len(_train):.3f}, "
          f"{sum(r['step_seconds'] for r in _train) / len(_train):.2f} s per step (both over all seeds)")
print("GRPO minus GR-REINFORCE: area under the eval curve "
      f"{plots.seeds_text([g - r for g, r in zip(_area['grpo'], _area['reinforce'])], seed_digits=3)}, "
      f"final eval exact match {plots.seeds_text([g - r for g, r in zip(_end['grpo'], _end['reinforce'])], seed_digits=3)}")
print("expected:", {k: v for k, v in EXPECTED.items() if k.startswith("math")})

# %%
fig = plots.plot_runs({f"math_toy {a}": r for a, r in mt.items()}, path="artifacts/hw4/math_toy.png")
plt.show()

# %% tags=["nbval-mask-samples"]
_gens = read_jsonl(f"{RUNS}/math_toy-grpo-seed0/generations.jsonl")
print(plots.format_generations(_gens, steps=(_gens[0]["step"], _gens[-1]["step"])))

# %% [markdown]
# ### Ablation: how far can GRPO's knobs go?
#
# Starting from the format_copy GRPO run, change one setting at a time: more epochs over each
# batch, smaller minibatches (more optimizer steps per batch; `6x1` means minibatches of 6 rows and
# no gradient accumulation), a weaker or stronger KL penalty, a narrower or wider clip range.
# The full study walks each axis outwards until a run degrades:
# `python -m llmrl.hw4 sweep --impl release/hw4/llm_rl.ipynb --seeds 0,1,2` (a few minutes per axis
# and seed; each run's curves go to its `metrics.jsonl` under `artifacts/hw4/ablation/`). Here, a short
# version with one extreme value per axis (two for the KL penalty: none at all and a strong one),
# 20 steps per run, each run with seeds 0, 1 and 2: a row gives the mean over the seeds with its
# standard deviation and every seed's value, the plot every seed as a small mark beside the means.
# A run counts as degraded when its mean final eval exact match falls 0.15 below the default run's,
# or its mean final reward 0.2 below. The default run is the same on every axis, so it is trained
# once and shown on each.
#
# **TODO for Question 4:** before you run the full sweep, predict for each knob which direction
# breaks the run first. **What you should find:** the final reward and exact match tell you whether a
# run broke, its KL and clip fraction (the printed rows; each run's curves are in
# `artifacts/hw4/ablation-notebook/<knob>-<value>-seed<k>/metrics.jsonl`) tell you why; at least one
# knob does not degrade within the values tried.

# %% tags=["nbval-mask-numbers"]
from llmrl.hw4.ablation import plot_sweep, sweep

torch.manual_seed(0)
_axes = {"ppo_epochs": [2, 8], "minibatch": [(24, 2), (3, 1)], "kl_coef": [0.0, 0.05, 8.0], "clip_eps": [0.2, 0.02]}
_base = default_config("format_copy", "grpo", steps=20)
if SHORT:  # under the autograder: one axis, one step (and SEEDS is one seed)
    _axes, _base = {"kl_coef": [0.05, 8.0]}, default_config("format_copy", "grpo", steps=1, eval_limit=4)
ablation = sweep(IMPL, "artifacts/hw4/ablation-notebook", _base, _axes, progress=False, fresh=True, seeds=SEEDS)
print(f"mean ± standard deviation over seeds {', '.join(map(str, SEEDS))} (each seed in brackets)")
for _r in ablation:
    print(f"{_r['axis']:>10} = {_r['label']:>5}: eval exact match {_r['final_eval_exact_match']:.3f} "
          f"± {_r['final_eval_exact_match_std']:.3f} [{', '.join(f'{v:.2f}' for v in _r['final_eval_exact_match_seeds'])}], "
          f"final reward {_r['final_reward']:.2f} ± {_r['final_reward_std']:.2f}, "
          f"mean clip fraction {_r['mean_clip_fraction']:.3f}, max KL {_r['max_kl']:.3f}"
          + ("  <- degraded" if _r["degraded"] else ""))

# %%
fig = plot_sweep(ablation, path="artifacts/hw4/ablation.png")
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_report_q1_kl_estimator", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Part 6: report
#
# Answer in a few sentences each, in your own words, citing your own plots and numbers. A person
# grades these 13 points; the cell above each answer holds its question.
#
# **Question 1 (the KL estimator, 3 points).** Why is $\hat k = e^{\Delta} - \Delta - 1$, with
# $\Delta = \log \pi_{\text{ref}}(y) - \log \pi_\theta(y)$ and $y \sim \pi_\theta$, an unbiased
# estimate of $\mathrm{KL}(\pi_\theta \| \pi_{\text{ref}})$, and why is it never negative for a
# single token? What would go wrong with the plain estimate $-\Delta$ as a penalty?
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (3 points).**
#
# - **1 point** unbiased: E_{y~pi_theta}[e^Delta] = sum_y pi_ref(y) = 1, so the e^Delta - 1 part has mean
#   0 and E[k] = E[-Delta] = KL.
# - **1 point** never negative: e^x >= 1 + x for every x (the exponential lies above its tangent at 0),
#   with equality only at Delta = 0.
# - **1 point** the plain -Delta: the same mean, but negative on every token the reference likes more, so
#   one batch can show a negative KL and the penalty is noisier; k3 adds a zero-mean term that cancels
#   much of the variance.
#
# Half points are fine.
# <!-- END MARK SCHEME -->

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

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_report_q2_order_and_bug", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Question 2 (implementation order and one bug, 2 points).** In which order did you implement and test the
# eight functions, and why that order? Describe one bug you had (or one the tests caught), the
# symptom you saw, and how you found it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (2 points).**
#
# - **1 point** an order with a reason tied to the data flow (log-probs, mask and KL before the losses;
#   advantages before either update; REINFORCE before GRPO, which must match it at ratio 1).
# - **1 point** one concrete bug with its symptom (a test message, a flat or wrong curve) and how it was
#   found; "no bugs" earns this point only with a test the student wrote or a check they ran.
#
# Half points are fine.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q2_order_and_bug", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Data-flow order: log-probs, mask and KL first (every loss consumes them), then minibatches, then
# group advantages (both algorithms need them), then REINFORCE (the simplest update, which checks the
# whole pipeline on format_copy), then GRPO (which at ratio 1 must reproduce REINFORCE's gradient).
# Example bug: a completion mask built from the input columns instead of the target columns drops
# the first completion token and scores the token after EOS; format_copy then learns the tag but
# keeps writing text after it (the clean bonus never comes), which the hand-made mask table exposes.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_report_q3_math_comparison", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Question 3 (the math comparison, 3 points).** Compare GR-REINFORCE and GRPO on the math task: eval curves,
# rollout reward, KL and clip fraction. Which is more sample-efficient over these steps, and why?
# What did each cost in time?
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (3 points).**
#
# - **1 point** both eval curves compared with numbers from the student's own runs (start and end), not
#   the expected values copied.
# - **1 point** sample efficiency explained: the same rollouts per step, GRPO's second clipped epoch gives
#   two optimizer steps per batch; REINFORCE's ratio is always 1 so it never clips. Judged over the
#   budget (the area under the eval curve, or the evals on the way), not by the final eval, where both
#   runs sit at the ceiling.
# - **1 point** the cost: KL and clip fraction read off the curves, and the extra time per step measured
#   or estimated (sampling dominates the step).
#
# Half points are fine; an answer that cites no number of the student's own runs loses at least one point.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q3_math_comparison", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# With the same 64 rollouts per step, GRPO's second clipped epoch gives it two optimizer steps per
# batch, and it was the more sample-efficient in every seed: the area under its eval curve (its
# mean held-out eval exact match over the 30 steps) was 0.844 ± 0.012 against 0.695 ± 0.032 for
# GR-REINFORCE, GRPO minus GR-REINFORCE 0.148 ± 0.038 (0.111 to 0.186 over seeds 0 to 2). It learned
# faster early: at step 10 its eval was 0.951 against 0.471. By step 30 both had nearly solved
# math_toy, from 0.273 before RL (GRPO 0.982, GR-REINFORCE 0.987); a final gap of -0.005 ± 0.018 is
# no evidence that either ends higher, and it is why the final eval cannot show sample efficiency
# on a task that both runs solve. The price of the second epoch is a larger KL to the reference (at
# most 0.033 against 0.016, means over the seeds) and one more forward and backward pass over the
# batch per step, which the seconds per step above put a price on (wall time: a busy machine
# inflates both runs' numbers, and the sampling, which both pay alike, is a large part of a step).
# Clipping was negligible (mean clip fraction 0.000 to three decimals: a few GRPO tokens in some
# steps, none for GR-REINFORCE, whose ratio is 1 by construction): at this learning rate the second
# epoch moves the ratio too little to reach the clip range.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_report_q4_ablation", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Question 4 (the ablation, 3 points).** Summarise your ablation: for each knob, which direction degraded the
# run, at what value, and what the curves (reward, KL, clip fraction) showed when it did.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (3 points).**
#
# - **1 point** every knob covered (epochs, minibatch size with accumulation, kl_coef smaller AND larger,
#   clip_eps), with the value at which the run degraded or the statement that it did not within the range
#   tried.
# - **1 point** what the curves showed at the degradation (reward, KL, clip fraction), with numbers.
# - **1 point** a mechanism for each direction that matches the curves (too many optimizer steps per batch
#   leave the trust region; a large KL pins the policy to the base model's format; a tiny clip range
#   removes the gradient).
#
# Half points are fine; an answer that cites no number of the student's own runs loses at least one point.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q4_ablation", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# In 20 steps with seeds 0 to 2, only the strong KL penalty degraded the run. `kl_coef = 8` held the
# policy at the base model: its largest KL stayed at 0.001 (0.018 for the default) and its final
# reward at 0.68 ± 0.03 against 1.16 ± 0.04, although its eval exact match (0.995) shows that it
# copies the number; the clean tag format never took over. No penalty at all (`kl_coef = 0`) ended
# like the default: at a KL this small a penalty of 0.05 costs almost nothing. More optimizer steps
# per batch did not degrade the run within the values tried; they sped it up. 8 epochs reached a
# final reward of 1.30 ± 0.01 and minibatches of 3 rows (`3x1`) 1.27 ± 0.02, with the largest KLs of
# the study (0.021 and 0.063) and the first clipping (mean clip fraction 0.001 and 0.005), the first
# signs of leaving the trust region; their eval exact match stays at or just below the default's
# (1.000 and 0.984 against 1.000). A tiny clip range (`clip_eps = 0.02`) clipped the most (0.006) and slowed learning
# a little (final reward 1.09 ± 0.03) without degrading it. Where epochs, minibatch size and the
# clip range do break the run is for the full sweep to find.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_report_q5_generations", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Question 5 (generations, 2 points).** Quote one or two sampled completions from your runs, with their reward
# and advantage, that taught you something about the run (a reward hack, a format the policy
# settled on, a group with zero advantage everywhere, ...). What did they show?
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (2 points).**
#
# - **1 point** one or two completions quoted verbatim with their reward and advantage.
# - **1 point** what they taught about the run (a format the policy settled on, a reward hack, a group
#   with advantage 0 everywhere and why that group gives no gradient).
#
# Half points are fine; an answer that cites no number of the student's own runs loses at least one point.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "report_q5_generations", "locked": false, "points": 2, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Early format_copy groups mix "Answer: N" (reward 0, advantage about -1) with the tagged copy
# (1.3, advantage above +1): the advantage sign alone says which format to reinforce. Late groups
# are all "<answer>N</answer>" with reward 1.3 and advantage 0: such groups no longer produce any
# gradient, which is why the reward curve flattens once the task is solved.
# ### END SOLUTION
