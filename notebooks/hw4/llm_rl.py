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
# >
# > **When graded**, your functions run in a kernel where the course library `llmrl` keeps its
# > names and constants but none of its code: they have torch, numpy, `math` and Python's
# > standard library, the helpers you write and this notebook's other functions (Tasks 7 and 8 call your Task 3),
# > and a call to a library function fails its test with `LibraryNotAvailable`. Of a cell you add,
# > only its imports, functions, classes and constants run there.
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
# the mean over seeds 0, 1 and 2, so expect a few points either way).
EXPECTED = {
    "format_copy_final_reward": 1.25,            # GRPO 1.27, GR-REINFORCE 1.22
    "format_copy_final_eval_exact_match": 1.0,   # well below 0.8 means a bug
    "format_copy_grpo_halfway_step": 12,         # GRPO's reward passes halfway from its start to 1.3 (a ramp)
    "math_base_eval": 0.27,
    "math_reinforce_eval": 0.99,
    "math_grpo_eval": 0.98,
    "math_step10_grpo_ahead": True,              # GRPO's eval at step 10 above GR-REINFORCE's (0.95 against 0.47)
    "math_grpo_minus_reinforce_eval_area": 0.15,  # GRPO the more sample-efficient
}
# The published runs: Qwen2.5-Math-1.5B-Instruct with LoRA on a GPU, format_copy and MATH level 5. The
# runs below print these beside their own numbers.
PUBLISHED = {
    "format_copy": "reward jumps sharply around step 10 and reaches about 1.3 (the maximum); eval exact match "
                   "approaching 1.0 (materially below 0.8 means a bug)",
    "math": "eval 0.23-0.26 before RL; GR-REINFORCE near 0.31 at the end; GRPO above 0.37 at the end, with a "
            "training reward above 0.55",
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


# %% nbgrader={"grade": true, "grade_id": "test_task1_per_token_logprobs_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 1, values: column t of the logits scores the token in column t + 1.
_g = torch.Generator().manual_seed(0)
_logits = torch.randn(2, 5, 7, generator=_g)
_ids = torch.randint(0, 7, (2, 5), generator=_g)
_out = compute_per_token_logprobs(_logits, _ids)
assert _out.shape == (2, 4), f"expected shape [B, T-1] = (2, 4), got {tuple(_out.shape)}"
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
print("visible tests for task 1 (values) passed")

### BEGIN HIDDEN TESTS
# Against a loop.
_g = torch.Generator().manual_seed(1)
_lg = torch.randn(3, 6, 5, generator=_g)
_ids = torch.randint(0, 5, (3, 6), generator=_g)
_want = torch.tensor([[torch.log_softmax(_lg[b, t], -1)[_ids[b, t + 1]].item() for t in range(5)] for b in range(3)])
assert torch.allclose(compute_per_token_logprobs(_lg, _ids), _want, atol=1e-5)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1_per_token_logprobs_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1, types, shapes and inputs: float32 [B, T - 1] whatever the logits' dtype (a real model may
# hand over bf16, fp16 or float64), any batch size, inputs untouched.
_g = torch.Generator().manual_seed(2)
_logits = torch.randn(2, 5, 7, generator=_g)
_ids = torch.randint(0, 7, (2, 5), generator=_g)
for _dtype in (torch.bfloat16, torch.float16, torch.float64, torch.float32):
    _out = compute_per_token_logprobs(_logits.to(_dtype), _ids)
    assert isinstance(_out, torch.Tensor) and _out.dtype == torch.float32, (
        f"{_dtype} logits gave {getattr(_out, 'dtype', type(_out).__name__)}: cast to float32 (logits.float()) "
        "BEFORE log_softmax, whatever the dtype")
_l0, _i0 = _logits.clone(), _ids.clone()
compute_per_token_logprobs(_logits, _ids)
assert torch.equal(_logits, _l0) and torch.equal(_ids, _i0), (
    "compute_per_token_logprobs changed its inputs (an in-place -= on the logits): compute on new tensors")
_out = compute_per_token_logprobs(torch.randn(1, 2, 7, generator=_g), torch.tensor([[3, 4]]))
assert _out.shape == (1, 1), (
    f"one sequence of 2 tokens: expected shape (1, 1), got {tuple(_out.shape)}: squeeze only the axis gather added")
print("visible tests for task 1 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = compute_per_token_logprobs(torch.randn(1, 6, 3, generator=_g), torch.randint(0, 3, (1, 6), generator=_g))
assert _out.shape == (1, 5) and _out.dtype == torch.float32
_out = compute_per_token_logprobs(torch.randn(4, 2, 3, generator=_g, dtype=torch.float64), torch.randint(0, 3, (4, 2), generator=_g))
assert _out.shape == (4, 1) and _out.dtype == torch.float32
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1_per_token_logprobs_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1, extreme inputs: very peaked float32 logits (the chosen tokens have probability about
# e^-120, below the smallest float32).
_lg = torch.zeros(2, 3, 4)
_lg[:, :, 0] = 120.0
_out = compute_per_token_logprobs(_lg, torch.tensor([[0, 3, 1], [0, 2, 0]]))
assert torch.isfinite(_out).all(), (
    f"very unlikely tokens got {_out.tolist()}: their probability underflows to 0, so log(softmax) is -inf; "
    "use torch.log_softmax")
print("visible tests for task 1 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# float32, peaked: a token with probability about e^-150 gets about -150, not -inf.
_lg = torch.zeros(1, 3, 4)
_lg[0, :, 0] = 150.0
_out = compute_per_token_logprobs(_lg, torch.tensor([[0, 3, 1]]))
assert torch.isfinite(_out).all() and torch.allclose(_out, torch.full((1, 2), -150.0), atol=1e-3), (
    f"an unlikely token got {_out.tolist()}: use torch.log_softmax, not log(softmax)")
# bf16 logits: the log-softmax itself runs in float32 (a bf16 log_softmax is off by up to ~0.03).
_g = torch.Generator().manual_seed(3)
_lg16 = (torch.randn(2, 6, 50, generator=_g) * 4).bfloat16()
_ids = torch.randint(0, 50, (2, 6), generator=_g)
_want = torch.log_softmax(_lg16.float()[:, :-1], -1).gather(-1, _ids[:, 1:, None])[..., 0]
assert torch.allclose(compute_per_token_logprobs(_lg16, _ids), _want, atol=1e-5), "compute the log_softmax in float32"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1_per_token_logprobs_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1, gradient: the policy loss backpropagates through these log-probs into the logits.
_g = torch.Generator().manual_seed(4)
_lg = torch.randn(2, 5, 4, generator=_g, requires_grad=True)
_out = compute_per_token_logprobs(_lg, torch.randint(0, 4, (2, 5), generator=_g))
assert _out.requires_grad, ("the log-probs carry no gradient: no torch.no_grad(), .detach() or .item() in "
                            "compute_per_token_logprobs (the training loss needs it)")
_out.sum().backward()
assert _lg.grad is not None and _lg.grad.abs().sum() > 0, "no gradient reached the logits"
print("visible tests for task 1 (gradient) passed")

### BEGIN HIDDEN TESTS
# The last logits column predicts nothing and gets no gradient; every other one does, and bf16
# logits get a gradient too.
assert (_lg.grad[:, -1] == 0).all() and (_lg.grad[:, :-1].abs().sum(-1) > 0).all()
_x = torch.randn(1, 3, 4, generator=_g).bfloat16().requires_grad_(True)
compute_per_token_logprobs(_x, torch.tensor([[0, 1, 2]])).sum().backward()
assert _x.grad is not None and _x.grad.dtype == torch.bfloat16 and _x.grad[0, :2].abs().sum() > 0
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


# %% nbgrader={"grade": true, "grade_id": "test_task2_completion_mask_values", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Task 2, values: completion columns (t + 1 >= prompt_len) that hold a real token.
_m = build_completion_mask(torch.tensor([[0, 1, 1, 1, 1, 0]]), 3)
assert _m.shape == (1, 5), f"expected shape [B, T-1] = (1, 5), got {tuple(_m.shape)}"
assert _m.tolist() == [[False, False, True, True, False]], f"the table's example: got {_m.tolist()}"
# Rows padded differently: each row's own attention_mask decides.
_am = torch.tensor([[1, 1, 1, 1, 1, 1],
                    [0, 1, 1, 1, 0, 0]])
assert build_completion_mask(_am, 2).tolist() == [[False, True, True, True, True], [False, True, True, False, False]], (
    f"two rows: got {build_completion_mask(_am, 2).tolist()}: every row's padding comes from its own attention_mask")
print("visible tests for task 2 (values) passed")

### BEGIN HIDDEN TESTS
_am = torch.tensor([[1, 1, 1, 1, 1, 1, 1],    # full-length completion
                    [0, 0, 1, 1, 1, 0, 0],    # two completion tokens, then padding
                    [0, 1, 1, 1, 1, 1, 0]])
_want = [[False, False, True, True, True, True],
         [False, False, True, True, False, False],
         [False, False, True, True, True, False]]
assert build_completion_mask(_am, 3).tolist() == _want, "prompt tokens, padding or the shift are off"
assert not build_completion_mask(_am, 7).any(), "no completion columns when prompt_len == T"
assert build_completion_mask(torch.ones(2, 4, dtype=torch.long), 1).all()
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_completion_mask_contract", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 2, types, shapes and inputs: a bool mask for an int, long or bool attention_mask, any batch
# size; the caller's attention_mask untouched.
_am = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
_ref = build_completion_mask(_am, 3)
for _dtype in (torch.long, torch.int32, torch.bool):
    _m = build_completion_mask(_am.to(_dtype), 3)
    assert isinstance(_m, torch.Tensor) and _m.dtype == torch.bool and _m.shape == (2, 5), (
        f"a {_dtype} attention_mask gave a {getattr(_m, 'dtype', type(_m).__name__)} mask of shape "
        f"{tuple(getattr(_m, 'shape', ()))}: return bool [B, T - 1] (.bool())")
    assert torch.equal(_m, _ref.bool()), f"a {_dtype} attention_mask gave {_m.tolist()}, a long one {_ref.tolist()}"
assert torch.equal(_am, torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])), (
    "build_completion_mask changed the caller's attention_mask (an assignment into it): build a new tensor")
print("visible tests for task 2 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_m = build_completion_mask(_am[1:], 3)
assert _m.shape == (1, 5) and _m.dtype == torch.bool, f"a batch of one: got {_m.dtype} {tuple(_m.shape)}"
assert build_completion_mask(torch.ones(3, 1, dtype=torch.long), 1).shape == (3, 0), "T = 1: no column to score"
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


# %% nbgrader={"grade": true, "grade_id": "test_task3_approx_kl_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 3, values: the k3 estimate, averaged over every real token of the batch.
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
# Per token, not per sequence: row 0 has 3 real tokens with k3 = k, row 1 has 1 with k3 = 0. The
# mean over the 4 real tokens is 3k / 4 (a mean of the rows' sums would be 3k / 2, of their means k / 2).
_lp = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
_ref = torch.tensor([[-2.0, -2.0, -2.0], [-1.0, -5.0, -5.0]])
_mk = torch.tensor([[True, True, True], [True, False, False]])
_k = math.exp(-1.0) + 1.0 - 1.0
_got = approx_kl_from_logprobs(_lp, _ref, _mk).item()
assert abs(_got - 3 * _k / 4) < 1e-6, (
    f"expected 3k / 4 = {3 * _k / 4:.5f}, got {_got:.5f}: the mean of k3 over ALL real tokens of the batch "
    "(sum over the mask / mask.sum()), not a sum or a mean per sequence")
print("visible tests for task 3 (values) passed")

### BEGIN HIDDEN TESTS
# Nonnegative for every pair.
_g = torch.Generator().manual_seed(3)
_a, _b = torch.randn(4, 6, generator=_g) * 5, torch.randn(4, 6, generator=_g) * 5
assert approx_kl_from_logprobs(_a, _b, torch.ones(4, 6, dtype=torch.bool)) >= 0
_k = lambda d: math.exp(d) - d - 1
_lp = torch.tensor([[-1.0, -1.0, -0.5], [-1.0, -2.0, -3.0]])
_ref = torch.tensor([[-2.0, -1.0, -0.1], [-3.0, -0.5, -1.0]])
_mk = torch.tensor([[True, True, False], [True, False, True]])
_want = (_k(-1.0) + 0.0 + _k(-2.0) + _k(2.0)) / 4
assert abs(approx_kl_from_logprobs(_lp, _ref, _mk).item() - _want) < 1e-5, "the mean over the 4 real tokens"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_approx_kl_edge", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 3, extreme inputs: the clamp of delta to [-20, 20], and padding that holds -inf.
# A token the reference finds absurd: delta = 200 would make e^delta overflow to inf. Clamped to 20,
# k3 is e^20 - 20 - 1.
_big = approx_kl_from_logprobs(torch.tensor([[-200.0]]), torch.tensor([[0.0]]), torch.tensor([[True]]))
assert torch.isfinite(_big), f"got {_big.item()}: clamp delta to [-20, 20] before exponentiating"
assert abs(_big.item() - (math.exp(20) - 21)) / math.exp(20) < 1e-4, (
    f"delta = 200: expected e^20 - 21 = {math.exp(20) - 21:.4g}, got {_big.item():.4g}: clamp delta itself to "
    "[-20, 20], then compute e^delta - delta - 1")
# Padding may hold -inf: select with torch.where, because 0 * inf is nan.
_m = torch.tensor([[True, False]])
_pad = approx_kl_from_logprobs(torch.tensor([[-1.0, float("-inf")]]), torch.tensor([[-1.0, float("-inf")]]), _m)
assert torch.isfinite(_pad) and _pad.item() == 0.0, (
    f"padding that holds -inf gave {_pad.item()}: select the real tokens with torch.where(mask, k3, 0) "
    "instead of multiplying by the mask")
print("visible tests for task 3 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# The clamp on the low side too: delta = -200 is clamped to -20, k3 = e^-20 + 19.
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
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_approx_kl_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, types and inputs: a 0-dim tensor of the log-probs' dtype; the inputs untouched.
_lp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], dtype=torch.float64)
_ref = torch.tensor([[-1.5, -1.0], [-0.5, -0.3]], dtype=torch.float64)
_mk = torch.tensor([[True, True], [True, False]])
_kl = approx_kl_from_logprobs(_lp, _ref, _mk)
assert isinstance(_kl, torch.Tensor) and _kl.ndim == 0, f"return a 0-dim tensor, got {type(_kl).__name__}"
assert _kl.dtype == torch.float64, f"float64 log-probs gave a {_kl.dtype} KL: keep their dtype"
assert torch.equal(_lp, torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], dtype=torch.float64)) and \
    torch.equal(_ref, torch.tensor([[-1.5, -1.0], [-0.5, -0.3]], dtype=torch.float64)), "approx_kl_from_logprobs changed its inputs"
print("visible tests for task 3 (types and inputs) passed")

### BEGIN HIDDEN TESTS
_kl = approx_kl_from_logprobs(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), torch.tensor([[True]]))
assert isinstance(_kl, torch.Tensor) and _kl.ndim == 0 and _kl.dtype == torch.float32, f"one token: got {_kl!r}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_approx_kl_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, gradient: the KL penalty trains through this estimate into the policy's log-probs.
_lp = torch.tensor([[-1.0, -2.0, -0.3]], requires_grad=True)
_kl = approx_kl_from_logprobs(_lp, torch.tensor([[-1.5, -1.0, -0.3]]), torch.tensor([[True, True, False]]))
assert _kl.requires_grad, ("the KL carries no gradient: return the tensor itself (no .item(), torch.tensor(...), "
                           ".detach() or torch.no_grad())")
_kl.backward()
assert _lp.grad is not None and _lp.grad[0, :2].abs().sum() > 0, "no gradient reached the log-probs"
print("visible tests for task 3 (gradient) passed")

### BEGIN HIDDEN TESTS
# d k3 / d logprobs = 1 - e^delta per token, divided by the number of real tokens; padding gets none.
_d = torch.tensor([-0.5, 1.0])
assert torch.allclose(_lp.grad[0, :2], (1 - torch.exp(_d)) / 2, atol=1e-6) and _lp.grad[0, 2] == 0, f"gradient {_lp.grad}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task4_iter_minibatches_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 4, values: minibatches of the right sizes, every row once, every field holding the same rows.
_batch = {"ids": torch.arange(10), "adv": torch.arange(10) * 10.0, "lp": torch.arange(20).view(10, 2)}
_mbs = list(iter_minibatches(_batch, 4))
assert [len(m["ids"]) for m in _mbs] == [4, 4, 2], (
    f"10 rows in minibatches of 4: expected sizes [4, 4, 2] (the last one smaller), got {[len(m['ids']) for m in _mbs]}")
assert torch.equal(torch.cat([m["ids"] for m in _mbs]), torch.arange(10)), "without a generator keep the order"


def _aligned(mb):
    return torch.equal(mb["adv"], mb["ids"] * 10.0) and torch.equal(mb["lp"], torch.stack([2 * mb["ids"], 2 * mb["ids"] + 1], 1))


for _m in _mbs:
    assert isinstance(_m, dict) and set(_m) == set(_batch), f"each minibatch is a dict with the batch's keys, got {type(_m).__name__}"
    assert _aligned(_m), "the fields of a minibatch hold different rows"
# With a generator every field of a minibatch still holds the same rows.
_mbs = list(iter_minibatches(_batch, 4, torch.Generator().manual_seed(3)))
assert all(_aligned(m) for m in _mbs), ("the fields of a minibatch hold different rows: draw ONE permutation and "
                                        "index every field with the same row indices")
assert sorted(torch.cat([m["ids"] for m in _mbs]).tolist()) == list(range(10)), "every row exactly once per pass"
print("visible tests for task 4 (values) passed")

### BEGIN HIDDEN TESTS
# Every row exactly once per pass, also when the minibatch size does not divide the batch.
_mbs = list(iter_minibatches(_batch, 3, torch.Generator().manual_seed(3)))
assert [len(m["ids"]) for m in _mbs] == [3, 3, 3, 1]
assert sorted(torch.cat([m["ids"] for m in _mbs]).tolist()) == list(range(10)), "every row exactly once per pass"
assert all(_aligned(_mb) for _mb in _mbs), "size 3 with a generator: the fields of a minibatch must hold the same rows"
# One minibatch when it is larger than the batch.
assert len(list(iter_minibatches(_batch, 100))) == 1
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_iter_minibatches_rng", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 4, random generator: with a generator the rows come in the order torch.randperm(n, generator=
# generator) gives, drawn from that generator alone (a seed reproduces a run of the reference code).
_batch = {"ids": torch.arange(10), "adv": torch.arange(10) * 10.0}
_state = torch.get_rng_state()
_seen = torch.cat([m["ids"] for m in iter_minibatches(_batch, 4, torch.Generator().manual_seed(3))])
assert not torch.equal(_seen, torch.arange(10)), (
    "with a generator the rows must come in a shuffled order: index every field with "
    "torch.randperm(n, generator=generator)")
assert torch.equal(_seen, torch.randperm(10, generator=torch.Generator().manual_seed(3))), (
    f"rows visited in the order {_seen.tolist()}, not the one torch.randperm(n, generator=generator) gives: draw the "
    "order with exactly that call, once, and walk it in slices of minibatch_size")
assert torch.equal(torch.get_rng_state(), _state), (
    "iter_minibatches changed torch's global random state: shuffle with the generator you are given only")
# The generator is the caller's: each pass draws from it, so the next pass comes in another order.
_gen = torch.Generator().manual_seed(5)
_first = [m["ids"].tolist() for m in iter_minibatches(_batch, 4, _gen)]
assert _first != [m["ids"].tolist() for m in iter_minibatches(_batch, 4, _gen)], (
    "two passes with the same generator visited the rows in the same order: do not re-seed the generator")
print("visible tests for task 4 (random generator) passed")

### BEGIN HIDDEN TESTS
_order = lambda seed: [m["ids"].tolist() for m in iter_minibatches(_batch, 3, torch.Generator().manual_seed(seed))]
assert _order(5) == _order(5), "the same generator seed gives the same order"
assert _order(5) != _order(6), "another seed should give another order"
assert sum(_order(7), []) == torch.randperm(10, generator=torch.Generator().manual_seed(7)).tolist()
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_iter_minibatches_contract", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 4, inputs and errors: the caller's batch untouched, fields of different lengths refused, a batch
# of one row.
_batch = {"ids": torch.arange(6), "adv": torch.arange(6) * 10.0}
_copy = {k: v.clone() for k, v in _batch.items()}
list(iter_minibatches(_batch, 4, torch.Generator().manual_seed(1)))
assert set(_batch) == set(_copy) and all(torch.equal(_batch[k], _copy[k]) for k in _copy), (
    "iter_minibatches changed the caller's batch (batch[k] = ... replaces its tensors): build new dicts")
# Fields with different row counts are a bug in the caller.
try:
    list(iter_minibatches({"a": torch.zeros(3), "b": torch.zeros(4)}, 2))
except ValueError:
    pass
else:
    raise AssertionError("fields with 3 and 4 rows must raise ValueError (before yielding anything)")
assert [len(m["ids"]) for m in iter_minibatches({"ids": torch.arange(1)}, 4)] == [1], "a batch of one row"
print("visible tests for task 4 (inputs and errors) passed")

### BEGIN HIDDEN TESTS
assert [m["ids"].tolist() for m in iter_minibatches({"ids": torch.arange(1)}, 4, torch.Generator().manual_seed(0))] == [[0]]
try:
    list(iter_minibatches({"a": torch.zeros(5, 2), "b": torch.zeros(4, 2)}, 2, torch.Generator().manual_seed(0)))
except ValueError:
    pass
else:
    raise AssertionError("fields with 5 and 4 rows must raise ValueError, with a generator too")
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


# %% nbgrader={"grade": true, "grade_id": "test_task5_group_advantages_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 5, values: each group of adjacent rows standardised with its own mean and population std.
_adv = compute_group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 2)
assert _adv.shape == (4,), f"expected shape (4,), got {tuple(_adv.shape)}"
assert not torch.allclose(_adv, torch.tensor([0.7071, -0.7071, 0.7071, -0.7071]), atol=1e-3), (
    "got +-0.707: that is the sample standard deviation; use the population std, std(unbiased=False)")
assert torch.allclose(_adv, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-5), f"got {_adv}"
# Two groups on different scales: each group is standardised with its own mean and std.
_adv = compute_group_advantages(torch.tensor([0.0, 0.1, 0.2, 10.0, 20.0, 30.0]), 3)
assert torch.allclose(_adv, torch.tensor([-1.2247, 0.0, 1.2247, -1.2247, 0.0, 1.2247]), atol=1e-3), (
    f"got {_adv}: reshape to [B / G, G] first, then standardise each row with its own mean and std")
print("visible tests for task 5 (values) passed")

### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(5)
# Against a loop, G = 4.
_r = torch.rand(12, generator=_g)
_want = torch.cat([(_r[i:i + 4] - _r[i:i + 4].mean()) / (_r[i:i + 4].std(unbiased=False) + 1e-6) for i in range(0, 12, 4)])
assert torch.allclose(compute_group_advantages(_r, 4), _want, atol=1e-5)
# G = 1: every advantage is zero.
assert (compute_group_advantages(torch.tensor([0.3, 1.0]), 1) == 0).all()
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task5_group_advantages_contract", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 5, types, inputs and eps: float32 [B] for any input dtype, the input untouched, eps where the
# formula puts it: (r - mean) / (std + eps).
_r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 0.0], dtype=torch.float64)
_adv = compute_group_advantages(_r, 3)
assert isinstance(_adv, torch.Tensor) and _adv.dtype == torch.float32 and _adv.shape == (6,), (
    f"return float32 of shape [B] = (6,), got {getattr(_adv, 'dtype', type(_adv).__name__)} {tuple(getattr(_adv, 'shape', ()))}")
assert torch.equal(_r, torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 0.0], dtype=torch.float64)), "the rewards must not change"
# eps is added to the std: the first reward of group [1, 0, 0.5] is 0.5 above the mean, so
# 0.5 / advantage = std + eps, and eps = 0.5 must make it exactly 0.5 larger than eps = 0.
_den = [0.5 / compute_group_advantages(_r, 3, eps=_e)[0].item() for _e in (0.0, 0.5)]
assert abs(_den[1] - _den[0] - 0.5) < 1e-5, (
    f"eps = 0 and eps = 0.5 gave denominators {_den[0]:.5f} and {_den[1]:.5f} (0.5 / advantage): (r - mean) / "
    "(std + eps) with the eps you are given, added to the std (not inside a square root, not a clamp)")
# A batch that does not divide into groups is an error, never a silently wrong grouping.
try:
    compute_group_advantages(torch.rand(10, generator=torch.Generator().manual_seed(0)), 4)
except (ValueError, RuntimeError):
    pass
else:
    raise AssertionError("10 rewards cannot form groups of 4: raise an error")
print("visible tests for task 5 (types, inputs and eps) passed")

### BEGIN HIDDEN TESTS
_adv = compute_group_advantages(torch.tensor([3.0, 1.0]), 2, eps=1.0)
assert torch.allclose(_adv, torch.tensor([0.5, -0.5])), f"eps=1: expected [0.5, -0.5], got {_adv}"
assert compute_group_advantages(torch.tensor([1, 0, 0, 1]), 2).dtype == torch.float32, "integer rewards give float32"
try:
    compute_group_advantages(torch.rand(7, generator=torch.Generator().manual_seed(0)), 2)
except (ValueError, RuntimeError):
    pass
else:
    raise AssertionError("7 rewards cannot form groups of 2: raise an error")
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task5_group_advantages_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 5, extreme inputs: a group in which every sample got the same reward gives exactly 0 (float32
# rounding turns it into about 0.01).
_adv = compute_group_advantages(torch.full((8,), 0.1), 8)
assert (_adv.abs() < 1e-6).all(), (
    f"a constant group gave {_adv[0].item():.2e} instead of 0: do the arithmetic in float64 (rewards.double()), "
    "then return float32")
print("visible tests for task 5 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# Other constant groups next to normal ones: zeros, no nan.
_adv = compute_group_advantages(torch.tensor([1.3, 1.3, 1.3, 0.0, 1.3, 0.2]), 3)
assert torch.isfinite(_adv).all() and (_adv[:3].abs() < 1e-6).all(), f"zero-std group must give zeros, got {_adv}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task6_normalize_advantages_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 6, values: normalise with the batch statistics first, then clip.
_a = torch.tensor([1.0, 2.0, 3.0, 10.0])
assert torch.equal(maybe_normalize_advantages(_a.clone(), False, None), _a), "normalize=False, clip=None: unchanged"
assert torch.equal(maybe_normalize_advantages(_a.clone(), False, 2.5), torch.tensor([1.0, 2.0, 2.5, 2.5])), "clip to [-2.5, 2.5]"
# The batch's population std: [1, 3] has mean 2 and std 1, so it becomes [-1, 1] (the sample std gives +-0.71).
_n = maybe_normalize_advantages(torch.tensor([1.0, 3.0]), True, None)
assert torch.allclose(_n, torch.tensor([-1.0, 1.0]), atol=1e-5), (
    f"[1, 3] normalised gave {_n}: subtract the batch mean, divide by the population std (unbiased=False) plus eps")
# Normalise first, then clip: the outlier 100 is clipped to 1 only after standardising.
_n = maybe_normalize_advantages(torch.tensor([0.0, 0.0, 0.0, 100.0]), True, 1.0)
assert abs(_n.max().item() - 1.0) < 1e-6 and _n.min().item() > -1.0, (
    f"got {_n}: normalise with the batch mean and std first, then clamp to [-clip, clip]")
print("visible tests for task 6 (values) passed")

### BEGIN HIDDEN TESTS
# The batch statistics: mean 0 and population std 1 (the sample std gives std 0.87 here).
_n = maybe_normalize_advantages(_a.clone(), True, None)
assert abs(_n.mean().item()) < 1e-5 and abs(_n.std(unbiased=False).item() - 1) < 1e-4, "batch mean 0, population std 1"
assert (maybe_normalize_advantages(torch.zeros(4), True, 5.0) == 0).all(), "a constant batch normalises to zeros"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task6_normalize_advantages_contract", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 6, arguments, types and inputs: clip on both sides, clip's default 5.0, eps as given; a new
# tensor of the input's dtype, the input untouched.
_a = torch.tensor([1.0, 2.0, 3.0, 10.0])
_n = maybe_normalize_advantages(_a, True, None)
assert torch.equal(_a, torch.tensor([1.0, 2.0, 3.0, 10.0])), (
    f"the input changed to {_a}: in-place operations (-=, /=, .sub_) modify the caller's tensor; compute a new one")
assert torch.equal(maybe_normalize_advantages(torch.tensor([-9.0, 9.0, 0.0]), False, 5.0), torch.tensor([-5.0, 5.0, 0.0])), (
    "clip=5 clamps to [-5, 5]: both sides")
assert torch.equal(maybe_normalize_advantages(torch.tensor([-9.0, 9.0, 4.0]), False), torch.tensor([-5.0, 5.0, 4.0])), (
    "without a clip argument the default clip=5.0 applies")
# eps is added to the std: 3 is 1 above the mean of [1, 3], so 1 / advantage = std + eps, and eps = 1
# must make it exactly 1 larger than eps = 0.
_den = [1.0 / maybe_normalize_advantages(torch.tensor([1.0, 3.0]), True, None, eps=_e)[1].item() for _e in (0.0, 1.0)]
assert abs(_den[1] - _den[0] - 1.0) < 1e-5, (
    f"eps = 0 and eps = 1 gave denominators {_den[0]:.5f} and {_den[1]:.5f} (1 / advantage): (x - mean) / "
    "(std + eps) with the eps you are given")
_n = maybe_normalize_advantages(torch.tensor([1.0, 3.0], dtype=torch.float64), True, 5.0)
assert _n.dtype == torch.float64, f"float64 advantages came back as {_n.dtype}: keep their dtype"
print("visible tests for task 6 (arguments, types and inputs) passed")

### BEGIN HIDDEN TESTS
_out = maybe_normalize_advantages(_a, False, None)
_out += 1
assert torch.equal(_a, torch.tensor([1.0, 2.0, 3.0, 10.0])), "return a new tensor, not the input itself"
_n = maybe_normalize_advantages(torch.tensor([1.0, 3.0, 5.0]), True, None, eps=0.0)
assert _n.shape == (3,) and torch.isfinite(_n).all(), f"eps=0: got {_n}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task7_reinforce_loss_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 7, values: each row's mean log-prob over its real tokens, times its advantage, averaged over rows.
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
# Padding holding -inf must not matter.
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(reinforce_loss(_lpi, _lp, _mk, _adv, 0.1)), (
    "padding log-probs may be -inf and 0 * inf is nan: select the real tokens with torch.where(mask, logprobs, 0)")
print("visible tests for task 7 (values) passed")

### BEGIN HIDDEN TESTS
# A row with no real token contributes 0 instead of nan.
_l = reinforce_loss(_lp, _lp, torch.tensor([[True, True, False], [False, False, False]]), _adv, 0.0)
assert torch.isfinite(_l) and abs(_l.item() - 1.0) < 1e-6, f"expected -(1 * -2 + 0) / 2 = 1.0, got {_l}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task7_reinforce_loss_kl", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 7, KL term: kl_coef as given, times your approx_kl_from_logprobs (a mean per token).
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_adv = torch.tensor([1.0, -1.0])
_ref = _lp - torch.tensor([[0.5, 1.0, 0.0], [0.2, 0.0, 0.0]])
for _coef in (0.2, 1.5):
    _d = reinforce_loss(_lp, _ref, _mk, _adv, _coef) - reinforce_loss(_lp, _ref, _mk, _adv, 0.0)
    _want = _coef * approx_kl_from_logprobs(_lp, _ref, _mk).item()
    assert abs(_d.item() - _want) < 1e-6, (
        f"kl_coef = {_coef} changed the loss by {_d.item():.5f}, expected {_want:.5f}: add kl_coef * "
        "approx_kl_from_logprobs(logprobs, ref_logprobs, mask), with the kl_coef you are given")
print("visible tests for task 7 (KL term) passed")

### BEGIN HIDDEN TESTS
# Another batch, the default-sized coefficient: still kl_coef times your approx_kl_from_logprobs.
_g = torch.Generator().manual_seed(7)
_lp3, _ref3 = -torch.rand(3, 4, generator=_g) * 3, -torch.rand(3, 4, generator=_g) * 3
_mk3 = torch.arange(4)[None, :] < torch.tensor([4, 1, 2])[:, None]
_d = reinforce_loss(_lp3, _ref3, _mk3, torch.ones(3), 0.05) - reinforce_loss(_lp3, _ref3, _mk3, torch.ones(3), 0.0)
assert abs(_d.item() - 0.05 * approx_kl_from_logprobs(_lp3, _ref3, _mk3).item()) < 1e-6, "kl_coef = 0.05"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task7_reinforce_loss_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 7, gradient: -A / |y| per real token from the policy term, plus the KL term's own gradient.
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_x = _lp.clone().requires_grad_(True)
_loss = reinforce_loss(_x, _lp, _mk, torch.tensor([2.0, 0.0]), 0.0)
assert _loss.requires_grad, "the loss carries no gradient"
_loss.backward()
assert torch.allclose(_x.grad, torch.tensor([[-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]])), (
    f"expected the gradient [[-0.5, -0.5, 0], [0, 0, 0]] (-A / |y| per real token), got {_x.grad}")
# With kl_coef = 1 the KL term's gradient adds to it (the KL trains the policy too).
_ref = _lp - 0.5
_x = _lp.clone().requires_grad_(True)
reinforce_loss(_x, _ref, _mk, torch.tensor([2.0, 0.0]), 1.0).backward()
_y = _lp.clone().requires_grad_(True)
approx_kl_from_logprobs(_y, _ref, _mk).backward()
assert torch.allclose(_x.grad, torch.tensor([[-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]) + _y.grad, atol=1e-6), (
    "with kl_coef = 1 the gradient is the policy term's plus the KL's: compute the KL on the log-probs themselves "
    "(no .detach())")
print("visible tests for task 7 (gradient) passed")

### BEGIN HIDDEN TESTS
# -inf padding: a finite gradient too.
_lpi = _lp.masked_fill(~_mk, float("-inf"))
_x = _lpi.clone().requires_grad_(True)
reinforce_loss(_x, _lp, _mk, torch.tensor([1.0, -1.0]), 0.0).backward()
assert torch.isfinite(_x.grad).all() and (_x.grad[~_mk] == 0).all(), f"-inf padding gave the gradient {_x.grad}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task7_reinforce_loss_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 7, types and inputs: a 0-dim tensor of the log-probs' dtype; the inputs untouched.
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]], dtype=torch.float64)
_mk = torch.tensor([[True, True, False], [True, False, False]])
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_lp0 = _lp.clone()
_loss = reinforce_loss(_lp, _lp - 0.1, _mk, _adv, 0.1)
assert isinstance(_loss, torch.Tensor) and _loss.ndim == 0, "return a scalar tensor"
assert _loss.dtype == torch.float64, f"float64 log-probs gave a {_loss.dtype} loss: keep their dtype"
assert torch.equal(_lp, _lp0), "reinforce_loss changed the caller's log-probs (an in-place fill of the padding)"
print("visible tests for task 7 (types and inputs) passed")

### BEGIN HIDDEN TESTS
_l = reinforce_loss(torch.tensor([[-2.0]]), torch.tensor([[-2.0]]), torch.tensor([[True]]), torch.tensor([3.0]), 0.5)
assert isinstance(_l, torch.Tensor) and _l.ndim == 0 and _l.dtype == torch.float32, f"one token: got {_l!r}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 8, values: the clipped surrogate, per-sequence mean first, then the mean over rows.
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
print("visible tests for task 8 (values) passed")

### BEGIN HIDDEN TESTS
# A random batch against the formula token by token (eps = 0.2).
_g = torch.Generator().manual_seed(8)
_o = -torch.rand(3, 4, generator=_g) * 2
_x = _o + 0.5 * torch.randn(3, 4, generator=_g)
_m = torch.tensor([[True, True, True, False], [True, False, False, False], [True, True, True, True]])
_a = torch.tensor([0.7, -1.2, 2.0])
_rho = torch.exp(_x - _o)
_s = torch.minimum(_rho * _a[:, None], _rho.clamp(0.8, 1.2) * _a[:, None])
_want = -torch.stack([_s[b][_m[b]].mean() for b in range(3)]).mean()
assert abs(grpo_loss(_x, _o, _x, _m, _a, 0.2, 0.0).item() - _want.item()) < 1e-5, "a random batch: wrong value"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss_clip", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 8, clip_eps: the trust region [1 - clip_eps, 1 + clip_eps] for the clip_eps you are given.
_lp = torch.tensor([[0.0]])
_mk = torch.tensor([[True]])
for _eps in (0.1, 0.3):
    _old = _lp - math.log(1.5)                       # ratio 1.5, A = 1: clipped to 1 + eps
    _l = grpo_loss(_lp, _old, _lp, _mk, torch.tensor([1.0]), _eps, 0.0).item()
    assert abs(_l + (1 + _eps)) < 1e-5, (
        f"clip_eps = {_eps}, ratio 1.5, A = 1: expected -(1 + {_eps}) = {-(1 + _eps):.2f}, got {_l:.4f}: clip the "
        "RATIO to [1 - clip_eps, 1 + clip_eps] with the clip_eps you are given")
print("visible tests for task 8 (clip_eps) passed")

### BEGIN HIDDEN TESTS
for _eps, _rho, _a, _want in [(0.3, 0.5, -1.0, 0.7), (0.05, 1.2, 1.0, -1.05), (0.3, 1.25, 1.0, -1.25), (0.3, 0.6, -1.0, 0.7)]:
    _l = grpo_loss(_lp, _lp - math.log(_rho), _lp, _mk, torch.tensor([_a]), _eps, 0.0).item()
    assert abs(_l - _want) < 1e-5, f"clip_eps {_eps}, ratio {_rho}, A {_a}: expected {_want}, got {_l}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss_kl", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 8, KL term: kl_coef as given, times your approx_kl_from_logprobs to the REFERENCE policy.
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_adv = torch.tensor([1.0, -0.5])
_old = _lp + 0.1
_ref = _lp - 0.3
for _coef in (0.5, 2.0):
    _d = grpo_loss(_lp, _old, _ref, _mk, _adv, 0.2, _coef) - grpo_loss(_lp, _old, _ref, _mk, _adv, 0.2, 0.0)
    _want = _coef * approx_kl_from_logprobs(_lp, _ref, _mk).item()
    assert abs(_d.item() - _want) < 1e-6, (
        f"kl_coef = {_coef} changed the loss by {_d.item():.5f}, expected {_want:.5f}: add kl_coef * "
        "approx_kl_from_logprobs(logprobs, ref_logprobs, mask) (the reference, not old_logprobs)")
print("visible tests for task 8 (KL term) passed")

### BEGIN HIDDEN TESTS
assert torch.isfinite(grpo_loss(_lp, _lp, _ref.masked_fill(~_mk, float("-inf")), _mk, _adv, 0.2, 0.1))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 8, gradient: tokens outside the trust region in their advantage's direction get none, the others do.
_lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
_mk = torch.tensor([[True, True, False], [True, False, False]])
_old = _lp - torch.tensor([[math.log(1.5), math.log(0.5), 0.0], [math.log(0.5), 0.0, 0.0]])
_x = _lp.clone().requires_grad_(True)
_loss = grpo_loss(_x, _old, _lp, _mk, torch.tensor([1.0, -1.0]), 0.2, 0.0)
assert _loss.requires_grad, "the loss carries no gradient"
_loss.backward()
assert _x.grad[0, 0] == 0 and _x.grad[1, 0] == 0, "tokens outside the trust region in the advantage's direction get no gradient"
assert abs(_x.grad[0, 1].item() + 0.5 * 0.5 / 2) < 1e-6 and (_x.grad[~_mk] == 0).all(), f"gradient {_x.grad}"
print("visible tests for task 8 (gradient) passed")

### BEGIN HIDDEN TESTS
# -inf padding (in log-probs and old log-probs alike): a finite loss, and a finite gradient of the
# clipped surrogate (mask the log-ratio before exp: exp(-inf - -inf) is nan).
_adv = torch.tensor([1.0, -0.5])
_lpi = _lp.masked_fill(~_mk, float("-inf"))
assert torch.isfinite(grpo_loss(_lpi, _lpi, _lpi, _mk, _adv, 0.2, 0.1)), "-inf padding made the loss non-finite"
_x = _lpi.clone().requires_grad_(True)
grpo_loss(_x, _lpi, _lpi, _mk, _adv, 0.2, 0.0).backward()
assert torch.isfinite(_x.grad).all() and (_x.grad[~_mk] == 0).all(), f"-inf padding gave the gradient {_x.grad}"
# At ratio 1 the GRPO gradient is GR-REINFORCE's: -A_i / (B |y_i|) per real token.
_x1 = _lp.clone().requires_grad_(True)
grpo_loss(_x1, _lp, _lp, _mk, _adv, 0.2, 0.0).backward()
assert torch.allclose(_x1.grad, torch.tensor([[-0.25, -0.25, 0.0], [0.25, 0.0, 0.0]]), atol=1e-6), f"gradient {_x1.grad}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task8_grpo_loss_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 8, types and inputs: a 0-dim tensor of the log-probs' dtype; the inputs untouched.
_lp = torch.tensor([[-1.0, -3.0], [-2.0, -9.0]], dtype=torch.float64)
_old = _lp + 0.2
_ref = _lp - 0.1
_mk = torch.tensor([[True, True], [True, False]])
_adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
_copies = [t.clone() for t in (_lp, _old, _ref, _adv)]
_loss = grpo_loss(_lp, _old, _ref, _mk, _adv, 0.2, 0.1)
assert isinstance(_loss, torch.Tensor) and _loss.ndim == 0, "return a scalar tensor"
assert _loss.dtype == torch.float64, f"float64 log-probs gave a {_loss.dtype} loss: keep their dtype"
assert all(torch.equal(a, b) for a, b in zip((_lp, _old, _ref, _adv), _copies)), "grpo_loss changed its inputs"
print("visible tests for task 8 (types and inputs) passed")

### BEGIN HIDDEN TESTS
_l = grpo_loss(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]), torch.tensor([[-1.0]]), torch.tensor([[True]]),
               torch.tensor([2.0]), 0.2, 0.5)
assert isinstance(_l, torch.Tensor) and _l.ndim == 0 and _l.dtype == torch.float32, f"one token: got {_l!r}"
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
# Debug on `format_copy` first: if your functions are right, its reward climbs from where the
# base model starts to the maximum of 1.3 within these steps (the run prints where it passes
# halfway). A run that stays flat points to the mask, the shift or the sign of the advantage.
#
# **Where these runs differ from the published ones.** The published results come from a GPU
# version of this homework; the runs here are sized for a laptop CPU, and every setting that differs
# is in this table. The published numbers quoted in this notebook are those of the GPU runs, so
# compare your numbers with the CPU expectations (`EXPECTED` in the first code cell), not with them.
#
# | setting | here (CPU) | published (GPU) | why |
# |---|---|---|---|
# | policy | character model, 110,592 parameters, every weight trained | Qwen2.5-Math-1.5B-Instruct, LoRA adapters (r = 16) | a 1.5B model does not train on a CPU in minutes |
# | learning rate | 5e-5 | 3e-5 | calibrated for the small model that trains all its weights: at 5e-5 format_copy's reward reaches 1.3 within the run (a steady climb, where the published one jumps) |
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
for algo, seeds in fc.items():  # the reward's rise: 3-step means, from the first 3 steps' mean to the maximum 1.3
    _rise = [plots.reward_rise([r["reward_mean"] for r in recs if "reward_mean" in r]) for recs in seeds]
    print(f"format_copy {algo:9s}: reward halfway to 1.3 at step {[r['mid'] for r in _rise]}, "
          f"from 20% to 80% of the way in {[r['width'] for r in _rise]} steps (seeds {', '.join(map(str, SEEDS))})")
print("expected:", {k: v for k, v in EXPECTED.items() if k.startswith("format")})
print("published (1.5B model, LoRA, GPU):", PUBLISHED["format_copy"])
_grpo_widths = [plots.reward_rise([r["reward_mean"] for r in recs if "reward_mean" in r])["width"] for recs in fc["grpo"]]
if min(_grpo_widths) > 5.5:  # a jump: from 20% to 80% of the way within 5 steps, half the published step of the jump
    print(f"note: GRPO's rise takes {min(_grpo_widths):.0f} steps or more on every seed, a ramp and not the published "
          "jump: the character model, trained whole at lr 5e-5, climbs steadily where the 1.5B model with LoRA jumps")

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
# solved task (GR-REINFORCE near 0.31, GRPO above 0.37: printed under the runs), so the final eval
# can tell them apart. `math_toy` is easier:
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
print("published (1.5B model, LoRA, GPU, MATH level 5):", PUBLISHED["math"])

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
# reward at 0.68 ± 0.03 against 1.16 ± 0.05, although its eval exact match (0.995) shows that it
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
