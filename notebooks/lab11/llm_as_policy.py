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
# # Lab 11: the language model as a policy
#
# > **Before you start.** 18 points, all graded automatically. Plan on about 2 to 3 hours for the
# > tasks; the experiment cells then run in under a minute on a laptop.
# >
# > | task | you write | points | about |
# > |---|---|---|---|
# > | 1a | `response_logprobs`: the log-prob of each response token (the shift) | 3 | 20 min |
# > | 1b | `sequence_logprob`: the log-prob of a whole response (the mask) | 2 | 10 min |
# > | 2 | `sample_with_temperature` | 3 | 20 min |
# > | 3 | `kl_estimators`: k1, k2, k3 | 3 | 15 min |
# > | 4 | `tilted_optimum` and `kl_objective`: the KL-regularized optimum $\pi^*$ | 4 | 40 min |
# > | 5 | `token_level_optimum`: $\pi^*$ one token at a time, with soft values | 3 | 30 min |
# >
# > **Testing one task.** Run the first code cell (the imports) once. Then run the task's cell and
# > the test cell right below it (Shift+Enter on each); after every change, run both again. Task 5
# > calls your Task 4, so do them in order. A failing test names the value it expected.
# >
# > **Done** means: every test cell prints `visible tests for task ... passed`, the check after
# > each experiment says your numbers match the reference (if not, it names the task to look at),
# > and the experiments print numbers close to the ones in "What you should see". The grader
# > runs further tests in the same cells (the edge cases the text warns about: padding that holds
# > `-inf`, very peaked logits, very small $\beta$), so a visible pass is necessary, not sufficient.
# >
# > **When graded**, your functions run in a kernel where the course library `llmrl` keeps its
# > names and constants but none of its code: they have torch, numpy, `math` and Python's
# > standard library, the helpers you write and this notebook's other functions (Task 5 calls your Task 4),
# > and a call to a library function fails its test with `LibraryNotAvailable`. Of a cell you add,
# > only its imports, functions, classes and constants run there.
#
# A language model that writes a response one token at a time is a policy: the state is the
# prompt plus the tokens written so far, the action is the next token, and
# $\pi_\theta(y \mid x) = \prod_t \pi_\theta(y_t \mid x, y_{<t})$.
# Every RL algorithm for language models in the coming chapters needs $\log \pi_\theta(y \mid x)$,
# and that number is easy to get subtly wrong. In this lab you write the plumbing that computes it
# and then use it to study temperature, three ways to estimate a KL from samples, and the best
# policy under a KL penalty.
#
# Three experiments then run on your functions: temperature on a small trained model, KL estimates
# against the exact KL, and the reward-KL frontier of a toy model small enough to enumerate.
# Fill in each cell that says `raise NotImplementedError()`.
#
# Tensor names: `B` batch, `T` tokens (prompt and response together), `V` vocabulary,
# `R = T - prompt_len` response tokens.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from llmrl import live_checks, toylm
from llmrl.sft.checkpoints import load_checkpoint
from llmrl.labs import lab11
from llmrl.labs.lab11 import EXPECTED
from llmrl.utils import grading_mode, set_threads

set_threads(1)  # one thread: reproducible and, at this size, the fastest

# %% [markdown]
# ## Task 1a: log-probabilities of the response tokens
#
# A causal language model reads `tokens[:, :T]` and returns `logits` of shape `[B, T, V]`.
# Read the logits at **column t** as a forecast: having seen `tokens[:, :t+1]` and nothing later,
# the model says what **column t + 1** will hold. So the token at column `t` is scored by the
# logits at column `t - 1`, the first token has no score, and the last column of logits
# forecasts a token that has not been written yet.
#
# A 4-column example with a 2-token prompt `x0 x1` and a 2-token response `y2 y3`:
#
# | logits column | 0 | 1 | 2 | 3 |
# |---|---|---|---|---|
# | scores the token at column | 1 (prompt) | 2 (`y2`) | 3 (`y3`) | nothing |
#
# Write `response_logprobs`: turn the logits into log-probabilities with `torch.log_softmax`,
# then pick out, for every **response** token, the log-probability the model gave to the token
# that actually came next (`torch.gather`). Return only the response part, shape `[B, R]`.
# Draw the table for your own shapes on paper before you write the slice: an off-by-one here
# trains on the wrong tokens without any error message, which is why real training code gets it
# wrong so often.


# %% nbgrader={"grade": false, "grade_id": "task1a_response_logprobs", "locked": false, "schema_version": 3, "solution": true, "task": false}
def response_logprobs(logits: torch.Tensor, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probability of each response token under the model.

    logits:     float [B, T, V], the model's output on `tokens`
    tokens:     long  [B, T], the prompt (first `prompt_len` columns) followed by the response
    prompt_len: int, 1 <= prompt_len < T
    returns:    float [B, T - prompt_len]; entry [b, r] is log p(tokens[b, prompt_len + r] | tokens before it)
    """
    ### BEGIN SOLUTION
    logp = torch.log_softmax(logits[:, prompt_len - 1 : -1], dim=-1)  # [B, R, V]
    response = tokens[:, prompt_len:]  # [B, R]
    return logp.gather(-1, response.unsqueeze(-1)).squeeze(-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1a_response_logprobs_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, values: which logits column scores which token.
_g = torch.Generator().manual_seed(0)
_logits = torch.randn(2, 6, 5, generator=_g)
_tokens = torch.randint(0, 5, (2, 6), generator=_g)
_out = response_logprobs(_logits, _tokens, prompt_len=2)
assert _out.shape == (2, 4), f"expected shape [B, T - prompt_len] = (2, 4), got {tuple(_out.shape)}: return the response columns only"
assert (_out <= 0).all(), "a log-probability is never positive: turn the logits into log-probs with torch.log_softmax(..., dim=-1) first"

# The 4-column example of the text: prompt x0 x1, response y2 = 1, y3 = 2. Row c of `_probs` is the
# distribution that logits column c predicts; each column's logits carry a different constant, which
# log_softmax removes.
_probs = torch.tensor([[0.50, 0.25, 0.25],   # column 0 scores column 1 (prompt)
                       [0.10, 0.60, 0.30],   # column 1 scores y2 = 1 -> 0.6
                       [0.20, 0.10, 0.70],   # column 2 scores y3 = 2 -> 0.7
                       [0.40, 0.40, 0.20]])  # column 3 scores nothing
_logits = (_probs.log() + torch.tensor([[1.0], [2.0], [-3.0], [0.5]])).unsqueeze(0)
_out = response_logprobs(_logits, torch.tensor([[0, 2, 1, 2]]), prompt_len=2)
assert _out.shape == (1, 2), f"2 response tokens: expected shape (1, 2), got {tuple(_out.shape)}"
_p = [round(x, 3) for x in _out.exp().flatten().tolist()]
assert not torch.allclose(_out.exp(), torch.tensor([[0.1, 0.2]]), atol=1e-4), (
    f"hand example: got probabilities {_p}, which are what the logits in each token's OWN column give it. "
    "The token at column t is scored by the logits at column t - 1.")
assert not torch.allclose(_out.exp(), torch.tensor([[0.25, 0.3]]), atol=1e-4), (
    f"hand example: got probabilities {_p}, which come from the logits one column too far to the left "
    "(column t - 2 for the token at column t). The token at column t is scored by the logits at column t - 1.")
assert torch.allclose(_out, torch.tensor([[0.6, 0.7]]).log(), atol=1e-5), (
    f"hand example: expected probabilities [0.6, 0.7] for y2 and y3, got {_p}. Draw the table: logits column 1 "
    "scores y2, column 2 scores y3, and you pick each token's entry with torch.gather")
print("visible tests for task 1a (values) passed")

### BEGIN HIDDEN TESTS
# Against a plain loop, with prompt lengths 1 (the first logits column scores a response token),
# 3, and T - 1 (a single response token), and B, T, V all different.
for _pl in (1, 3, 6):
    _logits = torch.randn(3, 7, 5, generator=_g)
    _tokens = torch.randint(0, 5, (3, 7), generator=_g)
    _want = torch.tensor([[torch.log_softmax(_logits[b, t - 1], -1)[_tokens[b, t]].item() for t in range(_pl, 7)]
                          for b in range(3)])
    _got = response_logprobs(_logits, _tokens, prompt_len=_pl)
    assert _got.shape == _want.shape and torch.allclose(_got, _want, atol=1e-5), f"prompt_len={_pl}: wrong values"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1a_response_logprobs_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, types, shapes and inputs: a tensor of the logits' dtype, any batch size, inputs untouched.
_g = torch.Generator().manual_seed(10)
_logits = torch.randn(3, 5, 4, generator=_g, dtype=torch.float64)
_tokens = torch.randint(0, 4, (3, 5), generator=_g)
_logits0, _tokens0 = _logits.clone(), _tokens.clone()
_out = response_logprobs(_logits, _tokens, prompt_len=2)
assert isinstance(_out, torch.Tensor), f"return a torch.Tensor, got {type(_out).__name__}"
assert _out.dtype == torch.float64, (
    f"float64 logits gave {_out.dtype} log-probs: keep the logits' dtype (no .float(), no torch.tensor(list))")
assert torch.equal(_logits, _logits0) and torch.equal(_tokens, _tokens0), (
    "response_logprobs changed its inputs: the logits or tokens are the caller's, compute on new tensors "
    "(no in-place -=, .sub_, [...] =)")
# A batch of one sequence with a single response token is still [B, R] = (1, 1).
_out = response_logprobs(torch.randn(1, 3, 4, generator=_g), torch.tensor([[1, 2, 3]]), prompt_len=2)
assert _out.shape == (1, 1), (
    f"one sequence with one response token: expected shape (1, 1), got {tuple(_out.shape)}: "
    "squeeze only the axis you added (squeeze(-1)), never every axis of size 1")
print("visible tests for task 1a (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = response_logprobs(torch.randn(1, 6, 9, generator=_g), torch.randint(0, 9, (1, 6), generator=_g), prompt_len=4)
assert _out.shape == (1, 2) and _out.dtype == torch.float32, f"a batch of one: got {_out.dtype} {tuple(_out.shape)}"
_out = response_logprobs(torch.randn(4, 2, 3, generator=_g), torch.randint(0, 3, (4, 2), generator=_g), prompt_len=1)
assert _out.shape == (4, 1), f"T = 2, prompt_len = 1: expected (4, 1), got {tuple(_out.shape)}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1a_response_logprobs_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, extreme inputs: a very peaked distribution in float32. The response tokens are ones the
# model finds very unlikely (probability about e^-120, below the smallest float32).
_logits = torch.zeros(2, 3, 5)
_logits[:, :, 0] = 120.0
_out = response_logprobs(_logits, torch.tensor([[0, 4, 3], [0, 0, 1]]), prompt_len=1)
assert torch.isfinite(_out).all(), (
    f"very unlikely tokens got log-probs {_out.tolist()}: their probability underflows to 0 in float32, so "
    "log(softmax(...)) gives -inf. Use torch.log_softmax, which never forms the probability")
print("visible tests for task 1a (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# Their log-prob is about -150 (float32), and about -900 in float64.
_logits = torch.zeros(1, 4, 4)
_logits[0, :, 0] = 150.0
_out = response_logprobs(_logits, torch.tensor([[0, 0, 2, 3]]), prompt_len=2)
assert torch.isfinite(_out).all(), f"an unlikely token got log-prob {_out.tolist()}: use torch.log_softmax, not log(softmax)"
assert torch.allclose(_out, torch.full((1, 2), -150.0), atol=1e-3), f"expected about -150 for each, got {_out.tolist()}"
_logits = torch.zeros(1, 3, 3, dtype=torch.float64)
_logits[0, :, 2] = 900.0
_out = response_logprobs(_logits, torch.tensor([[2, 0, 2]]), prompt_len=1)
assert torch.allclose(_out, torch.tensor([[-900.0, 0.0]], dtype=torch.float64), atol=1e-9), f"float64, peaked: got {_out}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1a_response_logprobs_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, gradient: training backpropagates through these log-probs into the logits.
_g = torch.Generator().manual_seed(12)
_logits = torch.randn(2, 6, 5, generator=_g, requires_grad=True)
_out = response_logprobs(_logits, torch.randint(0, 5, (2, 6), generator=_g), prompt_len=3)
assert _out.requires_grad, (
    "the log-probs carry no gradient: compute them with torch operations on the logits (no torch.no_grad(), "
    ".detach(), .item() or torch.tensor(...) of numbers)")
_out.sum().backward()
assert _logits.grad is not None and _logits.grad.abs().sum() > 0, "no gradient reached the logits"
print("visible tests for task 1a (gradient) passed")

### BEGIN HIDDEN TESTS
# Only the logits that score response tokens get a gradient: none for the columns that score
# prompt tokens, none for the last column; d log p(y) / d logits = onehot(y) - softmax.
_gnorm = _logits.grad.abs().sum(dim=(0, 2))
assert (_gnorm[:2] == 0).all() and _gnorm[5] == 0, f"gradient reached logits that score no response token: {_gnorm}"
assert (_gnorm[2:5] > 0).all(), f"logits columns 2-4 score the response and need a gradient: {_gnorm}"
_x = torch.randn(1, 3, 4, generator=_g, requires_grad=True)
response_logprobs(_x, torch.tensor([[0, 3, 1]]), prompt_len=2)[0, 0].backward()
_want = torch.nn.functional.one_hot(torch.tensor(1), 4).float() - torch.softmax(_x.detach()[0, 1], -1)
assert torch.allclose(_x.grad[0, 1], _want, atol=1e-6), f"the gradient of log p(y) is onehot(y) - softmax: got {_x.grad[0, 1]}"
### END HIDDEN TESTS


# %% [markdown]
# ## Task 1b: the log-probability of a whole response
#
# Responses in a batch have different lengths, so the `[B, R]` tensor of token log-probs is
# padded, and a bool `mask` of the same shape says which entries are real tokens.
# $\log \pi(y \mid x)$ is the sum of the token log-probs over the real tokens only.
#
# Padding positions can hold anything, including `-inf` (the model may give a padding token zero
# probability). Multiplying by the mask does not remove them: `0 * (-inf)` is `nan` in floating
# point, and one `nan` poisons the whole loss. Select with `torch.where` instead.


# %% nbgrader={"grade": false, "grade_id": "task1b_sequence_logprob", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sequence_logprob(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of the log-probs of the real (mask == True) response tokens.

    token_logprobs: float [B, R]
    mask:           bool  [B, R], True for a real token, False for padding
    returns:        float [B]
    """
    ### BEGIN SOLUTION
    return torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs)).sum(dim=-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1b_sequence_logprob_values", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, values: the sum over the real tokens.
_lp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]])
_mask = torch.tensor([[True, True, False], [True, True, True]])
_out = sequence_logprob(_lp, _mask)
assert _out.shape == (2,), f"expected one number per response, shape (2,), got {tuple(_out.shape)}"
assert torch.allclose(_out, torch.tensor([-1.5, -0.6])), (
    f"expected [-1.5, -0.6], got {_out}: log pi(y | x) is the SUM of the log-probs of the real tokens "
    "(mask True); a padding token adds nothing, and a mean is not a log-probability")
print("visible tests for task 1b (values) passed")

### BEGIN HIDDEN TESTS
# An all-padding row sums to 0, padding between real tokens is skipped.
_lp = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
_mask = torch.tensor([[False] * 4, [True, False, True, False], [True] * 4])
_out = sequence_logprob(_lp, _mask)
assert torch.allclose(_out, torch.stack([torch.tensor(0.0), _lp[1, 0] + _lp[1, 2], _lp[2].sum()]))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_sequence_logprob_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, types, shapes and inputs: a tensor [B] of the input's dtype, any batch size, inputs untouched.
_lp = torch.tensor([[-0.5, -1.0, -7.0], [-0.25, -0.5, -0.75]], dtype=torch.float64)
_mask = torch.tensor([[True, True, False], [True, False, True]])
_lp0, _mask0 = _lp.clone(), _mask.clone()
_out = sequence_logprob(_lp, _mask)
assert isinstance(_out, torch.Tensor), f"return a torch.Tensor, got {type(_out).__name__}"
assert _out.dtype == torch.float64, f"float64 log-probs gave a {_out.dtype} sum: keep the input's dtype"
assert torch.equal(_lp, _lp0) and torch.equal(_mask, _mask0), (
    "sequence_logprob changed its inputs (the padding was overwritten in the caller's tensor): select into a "
    "new tensor instead of assigning into token_logprobs")
_out = sequence_logprob(torch.tensor([[-0.5, -1.5]]), torch.tensor([[True, True]]))
assert _out.shape == (1,), (
    f"a batch of one response: expected shape (1,), got {tuple(_out.shape)}: sum over dim=-1 and squeeze nothing")
print("visible tests for task 1b (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = sequence_logprob(torch.tensor([[-3.0]], dtype=torch.float64), torch.tensor([[True]]))
assert _out.shape == (1,) and _out.dtype == torch.float64, f"B = R = 1: got {_out}"
assert sequence_logprob(_lp, _mask).shape == (2,)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_sequence_logprob_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, extreme inputs: padding may hold -inf, and 0 * (-inf) is nan, so multiplying by the mask
# does not remove it.
_out = sequence_logprob(torch.tensor([[-0.5, -float("inf"), -float("inf")]]), torch.tensor([[True, False, False]]))
assert not torch.isnan(_out).any(), (
    "nan: the padding holds -inf and 0 * (-inf) is nan. Select the real tokens with "
    "torch.where(mask, token_logprobs, 0) instead of multiplying by the mask")
assert torch.allclose(_out, torch.tensor([-0.5])), f"expected [-0.5], got {_out}"
print("visible tests for task 1b (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# A real token the model finds impossible (-inf) makes the response impossible: -inf, not a number.
_out = sequence_logprob(torch.tensor([[-0.5, -float("inf")], [-1.0, float("nan")]]),
                        torch.tensor([[True, True], [True, False]]))
assert _out[0] == -float("inf") and _out[1] == -1.0, f"expected [-inf, -1.0] (nan padding skipped too), got {_out}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_sequence_logprob_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, gradient: each real token's log-prob gets gradient 1, padding none, even when it holds -inf.
_lp = torch.tensor([[-0.5, -float("inf")], [-1.0, -2.0]], requires_grad=True)
_out = sequence_logprob(_lp, torch.tensor([[True, False], [True, True]]))
assert _out.requires_grad, "the result carries no gradient: compute it with torch operations on token_logprobs"
_out.sum().backward()
assert not torch.isnan(_lp.grad).any(), f"nan in the gradient: {_lp.grad}"
print("visible tests for task 1b (gradient) passed")

### BEGIN HIDDEN TESTS
assert torch.allclose(_out.detach(), torch.tensor([-0.5, -3.0])), f"expected [-0.5, -3.0], got {_out}"
assert torch.equal(_lp.grad, torch.tensor([[1.0, 0.0], [1.0, 1.0]])), f"padding must get no gradient: {_lp.grad}"
### END HIDDEN TESTS


# %% [markdown]
# ## Putting 1a and 1b together
#
# The log-probability of two responses of different lengths after the same 3-token prompt, under
# a random "model" (random logits). The second response is one token shorter; its last column is
# padding. Each row of the result is $\log \pi(y \mid x)$ for one response.

# %%
torch.manual_seed(11)
logits = torch.randn(2, 6, 7)                 # [B, T, V]: 3 prompt + 3 response columns
tokens = torch.tensor([[1, 4, 2, 5, 5, 3],
                       [1, 4, 2, 6, 0, 0]])  # the second response is [6, 0] plus one padding token
mask = torch.tensor([[True, True, True],
                     [True, True, False]])
token_lp = response_logprobs(logits, tokens, prompt_len=3)
print("token log-probs:\n", token_lp)
print("sequence log-probs:", sequence_logprob(token_lp, mask))
print("a correct 1a and 1b give [-7.0343, -2.4486]; the second row's third token is padding and adds nothing")

# %% [markdown]
# ## Task 2: sampling with a temperature
#
# At every step the policy turns the logits `z` of the next token into a distribution and draws
# from it. Dividing the logits by a **temperature** `T` before the softmax reshapes that
# distribution without retraining anything:
#
# $$\pi_T(v) = \frac{e^{z_v / T}}{\sum_u e^{z_u / T}}.$$
#
# `T = 1` is the model itself. `T < 1` sharpens it (the likeliest token gains), `T > 1` flattens it
# toward uniform. As `T` goes to 0 all the mass ends up on the largest logit, so `T = 0` is defined
# as **greedy decoding**: take the argmax. Treat it as its own case; `z / 0` is not a number you
# want in a softmax.
#
# Use `torch.multinomial` with the `generator` you are given, so that a fixed seed gives fixed
# samples. The library's `generate` will call your function once per token to write whole answers
# in the experiments below.


# %% nbgrader={"grade": false, "grade_id": "task2_sample_with_temperature", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sample_with_temperature(logits: torch.Tensor, temperature: float,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from softmax(logits / temperature); temperature 0 means argmax.

    logits:      float [B, V], the next-token logits of B sequences
    temperature: float >= 0 (raise ValueError if it is negative)
    generator:   torch.Generator or None, the source of randomness for torch.multinomial
    returns:     long [B], the chosen token ids
    """
    ### BEGIN SOLUTION
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task2_sample_with_temperature_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 2, values: many draws follow softmax(z / T), over the whole vocabulary.
def _frequencies(z, temperature, seed, n=20000):
    draws = sample_with_temperature(z.expand(n, len(z)), temperature, torch.Generator().manual_seed(seed))
    return torch.bincount(draws, minlength=len(z)) / n


# Many draws: the frequencies match softmax(z / T) (0.015 is about 4.5 standard errors at 20,000 draws).
_z = torch.tensor([1.0, 0.0, -1.0, 0.5])
_freq = _frequencies(_z, 1.0, seed=1)
assert torch.allclose(_freq, torch.softmax(_z, -1), atol=0.015), f"T = 1: frequencies {_freq} differ from softmax(z) {torch.softmax(_z, -1)}"
_freq = _frequencies(_z, 0.5, seed=3)
assert not torch.allclose(_freq, torch.softmax(_z * 0.5, -1), atol=0.015), (
    f"T = 0.5: frequencies {_freq} match softmax(z * T), a FLATTER distribution. Divide the logits by T: "
    "a temperature below 1 sharpens the distribution")
assert torch.allclose(_freq, torch.softmax(_z / 0.5, -1), atol=0.015), f"T = 0.5: frequencies {_freq}, expected softmax(z / T) = {torch.softmax(_z / 0.5, -1)}"
# A flat distribution over 2,000 tokens: 1,000 draws reach about 790 different tokens. Every token
# of the vocabulary can be drawn, not only the likeliest few.
_draws = sample_with_temperature(torch.zeros(1000, 2000), 1.0, torch.Generator().manual_seed(2))
assert len(torch.unique(_draws)) > 600, (
    f"1,000 draws from a uniform distribution over 2,000 tokens hit only {len(torch.unique(_draws))} different "
    "tokens: sample from the full softmax, not from a truncated part of the vocabulary")
print("visible tests for task 2 (values) passed")

### BEGIN HIDDEN TESTS
# Very small T is almost greedy; very large T is almost uniform.
assert (sample_with_temperature(_z.expand(2000, 4), 0.01, torch.Generator().manual_seed(4)) == 0).all()
assert torch.allclose(_frequencies(_z, 100.0, seed=5), torch.full((4,), 0.25), atol=0.02), "T = 100 should be close to uniform"
# A large vocabulary: the 4,950 tokens outside the top 50 hold most of the mass here, and draws land
# there as often as they should (5 standard errors).
_z = torch.randn(5000, generator=torch.Generator().manual_seed(7))
_tail = torch.ones(5000, dtype=torch.bool)
_tail[_z.topk(50).indices] = False
_draws = sample_with_temperature(_z.expand(300, 5000), 1.0, torch.Generator().manual_seed(8))
_share, _want = _tail[_draws].float().mean().item(), torch.softmax(_z, -1)[_tail].sum().item()
assert abs(_share - _want) < 5 * (_want * (1 - _want) / 300) ** 0.5, (
    f"large vocabulary: {_share:.3f} of the draws fall outside the top 50 tokens, expected about {_want:.3f}")
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_sample_with_temperature_rng", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 2, random generator: the generator you are given is the only source of randomness.
_z = torch.randn(200, 15, generator=torch.Generator().manual_seed(6))
_state = torch.get_rng_state()
_a = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(7))
_b = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(7))
assert torch.equal(_a, _b), "two generators with the same seed gave different samples: pass generator=generator to torch.multinomial"
assert torch.equal(torch.get_rng_state(), _state), (
    "sampling with a generator changed torch's global random state: draw only from the generator you are given "
    "(never torch.manual_seed, and no draws without generator=generator)")
assert not torch.equal(_a, sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(8))), (
    "generators with different seeds gave the same samples: the draws must come from the generator you are given")
_gen = torch.Generator().manual_seed(7)
_first = sample_with_temperature(_z, 1.0, _gen)
assert not torch.equal(_first, sample_with_temperature(_z, 1.0, _gen)), (
    "two calls with the same generator gave the same samples: use the generator itself (it advances with every "
    "draw), do not make a new one from its seed")
print("visible tests for task 2 (random generator) passed")

### BEGIN HIDDEN TESTS
# Without a generator the global RNG is used: torch.manual_seed makes it reproducible. (The global
# state is put back afterwards, so that these tests change nothing for the cells below.)
_state0 = torch.get_rng_state()
torch.manual_seed(3)
_c = sample_with_temperature(_z, 1.0)
torch.manual_seed(3)
assert torch.equal(_c, sample_with_temperature(_z, 1.0)), "generator=None: the draws should follow torch.manual_seed"
# The generator's draws do not depend on what the global RNG did before.
torch.manual_seed(99)
assert torch.equal(_a, sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(7)))
_state = torch.get_rng_state()
try:
    sample_with_temperature(_z, 0.0, torch.Generator().manual_seed(7))
except Exception:
    pass  # T = 0 itself is the extreme-inputs cell's concern
assert torch.equal(torch.get_rng_state(), _state), "greedy decoding must not touch the global random state"
torch.set_rng_state(_state0)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_sample_with_temperature_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 2, extreme inputs: T = 0 (greedy), banned tokens (-inf logits), a negative T.
_z = torch.tensor([[2.0, 0.0, -1.0, 1.0], [0.0, 0.5, 3.0, 0.0]])
try:
    _greedy = sample_with_temperature(_z, 0.0)
except Exception as e:
    raise AssertionError(f"T = 0 raised {type(e).__name__}: z / 0 is not a number. Treat T = 0 as its own case, "
                         "the argmax, before you divide by T") from None
assert torch.equal(_greedy, torch.tensor([0, 2])), f"T = 0 must pick the argmax of each row [0, 2], got {_greedy}"
print("visible tests for task 2 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# T = 0 on a batch, with -inf logits (banned tokens) and large values: argmax, no nan, no error.
_z = torch.randn(64, 15, generator=torch.Generator().manual_seed(2)) * 20
_z[:, 3] = -float("inf")
assert torch.equal(sample_with_temperature(_z, 0.0), _z.argmax(-1)), "T = 0 must be the argmax"
assert torch.equal(sample_with_temperature(_z, 0), _z.argmax(-1)), "T = 0 given as an int must be the argmax too"
# A banned token (-inf) is never drawn at T > 0 either.
assert not (sample_with_temperature(_z, 1.5, torch.Generator().manual_seed(9)) == 3).any(), "a token with logit -inf was drawn"
# A negative temperature is an error.
try:
    sample_with_temperature(_z, -1.0)
except ValueError:
    pass
else:
    raise AssertionError("a negative temperature must raise ValueError")
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_sample_with_temperature_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 2, types, shapes and inputs: long token ids of shape [B] at every temperature, any batch size.
_z = torch.tensor([[2.0, 0.0, -1.0, 1.0], [0.0, 0.5, 3.0, 0.0]])
_z0 = _z.clone()
for _T in (1.0, 0.0):
    try:
        _out = sample_with_temperature(_z, _T, torch.Generator().manual_seed(0))
    except Exception:
        if _T == 0.0:
            break  # T = 0 itself is the extreme-inputs cell's concern
        raise
    assert isinstance(_out, torch.Tensor) and _out.dtype == torch.long and _out.shape == (2,), (
        f"T = {_T}: expected a long tensor of shape [B] = (2,), got {getattr(_out, 'dtype', type(_out).__name__)} "
        f"{tuple(getattr(_out, 'shape', ()))}")
    _one = sample_with_temperature(_z[:1], _T, torch.Generator().manual_seed(0))
    assert _one.shape == (1,), (
        f"T = {_T}, a batch of one row: expected shape (1,), got {tuple(_one.shape)}: squeeze only the sample axis "
        "(squeeze(-1)), never every axis of size 1")
assert torch.equal(_z, _z0), "sample_with_temperature changed the logits it was given"
print("visible tests for task 2 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_gz = torch.Generator().manual_seed(4)
_out = sample_with_temperature(torch.randn(5, 7, generator=_gz, dtype=torch.float64), 0.7, torch.Generator().manual_seed(1))
assert _out.dtype == torch.long and _out.shape == (5,) and ((_out >= 0) & (_out < 7)).all()
assert sample_with_temperature(torch.randn(3, 7, generator=_gz), 1, torch.Generator().manual_seed(1)).shape == (3,), "an int T = 1"
### END HIDDEN TESTS


# %% [markdown]
# ## Task 3: three ways to estimate a KL from samples
#
# RL for language models keeps the policy $\pi$ close to a reference $\pi_{\text{ref}}$ (usually
# the SFT model) by penalising $\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}}) = \mathbb{E}_{y \sim \pi}
# [\log \pi(y) - \log \pi_{\text{ref}}(y)]$. An exact sum needs every vocabulary entry at each
# position: cheap for our 15-token model, not for a 150,000-token one, so training code estimates
# the KL from the tokens it sampled anyway. With $\ell = \log \pi(y) - \log \pi_{\text{ref}}(y)$ for
# a sampled token $y \sim \pi$:
#
# | estimator | formula | unbiased? | can be negative? |
# |---|---|---|---|
# | k1 | $\ell$ | yes | yes |
# | k2 | $\ell^2 / 2$ | no (close when $\pi \approx \pi_{\text{ref}}$) | no |
# | k3 | $e^{-\ell} - 1 + \ell$ | yes | no |
#
# k3 is unbiased because $\mathbb{E}_{y \sim \pi}[e^{-\ell}] = \sum_y \pi(y)\,
# \pi_{\text{ref}}(y)/\pi(y) = 1$, so the extra term $e^{-\ell} - 1$ has mean zero; and it is never
# negative because $e^{x} \ge 1 + x$. Watch the sign inside the exponential: it is $-\ell$, i.e.
# the ratio $\pi_{\text{ref}} / \pi$.


# %% nbgrader={"grade": false, "grade_id": "task3_kl_estimators", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kl_estimators(logp: torch.Tensor, logp_ref: torch.Tensor):
    """Per-token estimates of KL(pi || pi_ref) from tokens sampled from pi.

    logp:     float [...], log pi of the sampled tokens (any shape, e.g. [B, R])
    logp_ref: float [...], log pi_ref of the same tokens, same shape
    returns:  a tuple (k1, k2, k3) of tensors shaped like logp
    """
    ### BEGIN SOLUTION
    l = logp - logp_ref
    k1 = l
    k2 = 0.5 * l ** 2
    k3 = torch.exp(-l) - 1 + l
    return k1, k2, k3
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task3_kl_estimators_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, values: the three estimators on hand-computed tokens.
# A token with pi = 0.5 and pi_ref = 0.25: l = log 2.
_k1, _k2, _k3 = kl_estimators(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
assert torch.allclose(_k1, torch.tensor([math.log(2)])), f"k1 = l = log 2, got {_k1}"
assert torch.allclose(_k2, torch.tensor([math.log(2) ** 2 / 2])), f"k2 = l^2 / 2, got {_k2}"
assert torch.allclose(_k3, torch.tensor([0.5 - 1 + math.log(2)])), f"k3 = e^(-l) - 1 + l = 0.193..., got {_k3}"
# k3 is never negative.
_ks = kl_estimators(torch.randn(4, 5, generator=torch.Generator().manual_seed(0)), torch.zeros(4, 5))
assert (_ks[2] >= 0).all(), "k3 can never be negative"
print("visible tests for task 3 (values) passed")

### BEGIN HIDDEN TESTS
# Unbiasedness, computed exactly on a 3-token example: average each estimator over y ~ pi.
_p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
_q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
_true_kl = float((_p * (_p / _q).log()).sum())
_k1, _k2, _k3 = kl_estimators(_p.log(), _q.log())
assert abs(float((_p * _k1).sum()) - _true_kl) < 1e-9, "E_pi[k1] must equal KL(pi || pi_ref)"
assert abs(float((_p * _k3).sum()) - _true_kl) < 1e-9, "E_pi[k3] must equal KL(pi || pi_ref): check the sign of l in the exponential"
assert abs(float((_p * _k2).sum()) - _true_kl) > 1e-3, "k2 is biased: E_pi[k2] should differ from the KL here"
# Hand values with l < 0 (pi below pi_ref): k3 = e^(0.5) - 1 - 0.5.
_k1, _k2, _k3 = kl_estimators(torch.tensor([-0.5]), torch.tensor([0.0]))
assert torch.allclose(_k3, torch.tensor([math.exp(0.5) - 1.5])), f"l = -0.5: k3 = e^0.5 - 1.5, got {_k3}"
assert torch.allclose(_k2, torch.tensor([0.125])) and torch.allclose(_k1, torch.tensor([-0.5]))
# Equal log-probs: every estimator is 0.
_a = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
assert all(torch.allclose(k, torch.zeros(3, 4)) for k in kl_estimators(_a, _a.clone()))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_kl_estimators_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, types, shapes and inputs: a tuple of three tensors, each shaped like the inputs, of their dtype.
_g = torch.Generator().manual_seed(3)
_a = torch.randn(2, 3, 4, generator=_g, dtype=torch.float64)
_b = torch.randn(2, 3, 4, generator=_g, dtype=torch.float64)
_a0, _b0 = _a.clone(), _b.clone()
_out = kl_estimators(_a, _b)
assert isinstance(_out, tuple) and len(_out) == 3, (
    f"return a tuple (k1, k2, k3), got {type(_out).__name__}"
    + (f" of shape {tuple(_out.shape)}: torch.stack makes one tensor; return the three as a tuple"
       if isinstance(_out, torch.Tensor) else ""))
assert all(isinstance(k, torch.Tensor) and k.shape == (2, 3, 4) for k in _out), (
    f"each estimator has the shape of its inputs (2, 3, 4), got {[tuple(getattr(k, 'shape', ())) for k in _out]}")
assert all(k.dtype == torch.float64 for k in _out), f"float64 inputs gave {[k.dtype for k in _out]}: keep their dtype"
assert torch.equal(_a, _a0) and torch.equal(_b, _b0), (
    "kl_estimators changed its inputs: compute l = logp - logp_ref as a new tensor (no in-place .sub_ or -=)")
print("visible tests for task 3 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = kl_estimators(torch.tensor(-1.0), torch.tensor(-2.0))
assert isinstance(_out, tuple) and all(k.shape == () for k in _out), "0-dim inputs give 0-dim estimates"
_out = kl_estimators(torch.randn(1, 7, generator=_g), torch.randn(1, 7, generator=_g))
assert all(k.shape == (1, 7) and k.dtype == torch.float32 for k in _out), "a batch of one row, float32"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_kl_estimators_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, extreme inputs: very unlikely tokens. Both log-probs near -200 (probabilities below the
# smallest float32): the estimators depend only on their difference, l = -1 here.
_k1, _k2, _k3 = kl_estimators(torch.tensor([-200.0, -150.0]), torch.tensor([-199.0, -151.0]))
assert torch.isfinite(_k3).all(), (
    f"very unlikely tokens gave k3 = {_k3.tolist()}: e^(-l) from exp(logp_ref) / exp(logp) is 0 / 0 in float32; "
    "compute e^(-l) from the difference of the log-probs")
print("visible tests for task 3 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
assert torch.allclose(_k3, torch.tensor([math.e - 2, math.exp(-1) - 1 + 1])), f"expected [e - 2, e^-1], got {_k3}"
# A large log-ratio: finite and exact (k3 = e^-30 - 1 + 30).
_k3 = kl_estimators(torch.tensor([0.0], dtype=torch.float64), torch.tensor([-30.0], dtype=torch.float64))[2]
assert abs(_k3.item() - (math.exp(-30) + 29)) < 1e-9, f"l = 30: expected 29.0, got {_k3.item()}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_kl_estimators_grad", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, gradient: a KL penalty in a loss backpropagates through every estimator into logp.
_lp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
_ks = kl_estimators(_lp, torch.tensor([-1.5, -1.0, -0.5]))
for _name, _k in zip(("k1", "k2", "k3"), _ks):
    assert _k.requires_grad, (f"{_name} carries no gradient: compute the estimators with torch operations on logp "
                              "(no .detach(), torch.no_grad() or torch.tensor(...) of numbers)")
print("visible tests for task 3 (gradient) passed")

### BEGIN HIDDEN TESTS
# d k1 / d logp = 1, d k2 / d logp = l, d k3 / d logp = 1 - e^(-l).
_l = torch.tensor([0.5, -1.0, 0.0])
for _i, _want in enumerate((torch.ones(3), _l, 1 - torch.exp(-_l))):
    _grad, = torch.autograd.grad(_ks[_i].sum(), _lp, retain_graph=True)
    assert torch.allclose(_grad, _want, atol=1e-6), f"k{_i + 1}: gradient {_grad}, expected {_want}"
### END HIDDEN TESTS


# %% [markdown]
# ## Task 4: the best policy under a KL leash
#
# The objective of RL with a KL penalty is
#
# $$J(\pi) = \mathbb{E}_{y \sim \pi}[r(y)] - \beta\, \mathrm{KL}(\pi \,\|\, \pi_{\text{ref}}).$$
#
# Its maximiser has a closed form: tilt the reference by the exponentiated reward and renormalise,
#
# $$\pi^*(y) = \frac{\pi_{\text{ref}}(y)\, e^{r(y)/\beta}}{Z}, \qquad Z = \sum_{y'} \pi_{\text{ref}}(y')\, e^{r(y')/\beta}.$$
#
# Large $\beta$ keeps $\pi^*$ at $\pi_{\text{ref}}$; small $\beta$ lets it pile onto the best
# response. A real model cannot enumerate its responses, but our **toy LM** can: every response
# has exactly two tokens. In the "worked" scenario the first token is `a` (probability 0.7) or `b`
# (0.3); after `a` the second is `x` or `y` with 0.6 / 0.4, after `b` with 0.5 / 0.5; the rewards
# of `ax, ay, bx, by` are 0, 1, 0, 2.
#
# Write `tilted_optimum` **in log space**: $\log \pi_{\text{ref}} + r/\beta$, subtract the largest
# finite entry, exponentiate, normalise. Forming $e^{r/\beta}$ directly overflows to `inf` as soon
# as $r/\beta > 709$ (that is $\beta < 0.003$ here), and `inf / inf` is `nan`. A response with
# $\pi_{\text{ref}} = 0$ has $\log 0 = -\infty$ and must get probability 0 (use
# `np.errstate(divide="ignore")` around the log).
#
# Then write `kl_objective`, $J(\pi)$ for any policy over the same responses, with the convention
# $0 \log 0 = 0$.


# %% nbgrader={"grade": false, "grade_id": "task4_tilted_optimum", "locked": false, "schema_version": 3, "solution": true, "task": false}
def tilted_optimum(ref_probs: np.ndarray, rewards: np.ndarray, beta: float) -> np.ndarray:
    """pi*(y) = pi_ref(y) exp(r(y) / beta) / Z over all N responses, computed in log space.

    ref_probs: float [N], pi_ref of every response (sums to 1; zeros allowed)
    rewards:   float [N], the reward of every response
    beta:      float > 0
    returns:   float [N], pi* (sums to 1)
    """
    ### BEGIN SOLUTION
    with np.errstate(divide="ignore"):
        logits = np.log(np.asarray(ref_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
    logits = logits - logits.max()
    weights = np.exp(logits)
    return weights / weights.sum()
    ### END SOLUTION


def kl_objective(probs: np.ndarray, ref_probs: np.ndarray, rewards: np.ndarray, beta: float) -> float:
    """J(pi) = E_pi[r] - beta KL(pi || pi_ref), with 0 log 0 = 0.

    probs, ref_probs, rewards: float [N]; beta: float > 0
    returns: float
    """
    ### BEGIN SOLUTION
    probs = np.asarray(probs, dtype=float)
    ref_probs = np.asarray(ref_probs, dtype=float)
    support = probs > 0
    kl = np.sum(probs[support] * (np.log(probs[support]) - np.log(ref_probs[support])))
    return float(probs @ np.asarray(rewards, dtype=float) - beta * kl)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task4_tilted_optimum_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 4, values: pi* and J on the worked example.
worked = toylm.scenario("worked")
print("responses:", worked.responses, " pi_ref:", worked.ref_probs, " rewards:", worked.reward_vector)
_star = tilted_optimum(worked.ref_probs, worked.reward_vector, 1.0)
print("pi* at beta = 1:", np.round(_star, 5), " expected:", EXPECTED["worked_pi_star"])
assert np.shape(_star) == (4,) and abs(np.sum(_star) - 1) < 1e-9, "pi* is a distribution over the 4 responses"
assert np.allclose(_star, EXPECTED["worked_pi_star"], atol=1e-3), "pi* of the worked example at beta = 1"
# J(pi_ref) is just the expected reward (no KL); J(pi*) is larger.
_j_ref = kl_objective(worked.ref_probs, worked.ref_probs, worked.reward_vector, 1.0)
assert abs(_j_ref - 0.58) < 1e-9, f"J(pi_ref) = E_ref[r] = 0.58, got {_j_ref}"
assert kl_objective(_star, worked.ref_probs, worked.reward_vector, 1.0) > _j_ref
# J of another policy at beta = 0.5, term by term: E_q[r] - beta * sum q log(q / pi_ref).
_q = np.array([0.1, 0.2, 0.3, 0.4])
_want = float(_q @ worked.reward_vector - 0.5 * np.sum(_q * np.log(_q / worked.ref_probs)))
_j = kl_objective(_q, worked.ref_probs, worked.reward_vector, 0.5)
assert abs(_j - _want) < 1e-9, f"J(q) at beta = 0.5: expected {_want:.5f}, got {_j:.5f}: J = E_q[r] - beta KL(q || pi_ref)"
print("visible tests for task 4 (values) passed")

### BEGIN HIDDEN TESTS
# Large beta: pi* stays at pi_ref.
assert np.allclose(tilted_optimum(worked.ref_probs, worked.reward_vector, 1e6), worked.ref_probs, atol=1e-5)
# No policy beats pi*, and the gap is exactly beta KL(q || pi*) (the Gibbs identity).
_rng = np.random.default_rng(0)
for _beta in (0.2, 1.0, 3.0):
    _star = tilted_optimum(worked.ref_probs, worked.reward_vector, _beta)
    _j_star = kl_objective(_star, worked.ref_probs, worked.reward_vector, _beta)
    for _ in range(30):
        _q = _rng.dirichlet(np.ones(4))
        _gap = _j_star - kl_objective(_q, worked.ref_probs, worked.reward_vector, _beta)
        assert _gap >= -1e-12, "a random policy beat pi*"
        assert abs(_gap - _beta * toylm.kl_divergence(_q, _star)) < 1e-9, "J(pi*) - J(q) must equal beta KL(q || pi*)"
# The library's hack scenario, six responses, against the library.
_hack = toylm.scenario("hack")
for _beta in (0.05, 0.6, 5.0):
    assert np.allclose(tilted_optimum(_hack.ref_probs, _hack.reward_vector, _beta),
                       toylm.tilted_optimum(_hack.ref_probs, _hack.reward_vector, _beta), atol=1e-12)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_tilted_optimum_contract", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 4, types, shapes and inputs: pi* a float64 numpy array [N], J a float, the inputs untouched.
_ref = np.array([0.2, 0.3, 0.5])
_r = np.array([1.0, 0.0, 2.0])
_ref0, _r0 = _ref.copy(), _r.copy()
_star = tilted_optimum(_ref, _r, 0.5)
assert isinstance(_star, np.ndarray) and _star.shape == (3,), (
    f"tilted_optimum must return a numpy array of shape [N] = (3,), got {type(_star).__name__} {np.shape(_star)}")
assert _star.dtype == np.float64, f"pi* came back as {_star.dtype}: compute in float64"
_j = kl_objective(_star, _ref, _r, 0.5)
assert isinstance(_j, float), f"kl_objective must return a float, got {type(_j).__name__} {np.shape(_j)}: float(...) it"
assert np.array_equal(_ref, _ref0) and np.array_equal(_r, _r0), (
    "tilted_optimum or kl_objective changed the caller's arrays (np.asarray does not copy: `rewards /= beta` "
    "divides the caller's rewards); compute into new arrays")
print("visible tests for task 4 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_one = tilted_optimum(np.array([1.0]), np.array([3.0]), 0.1)
assert isinstance(_one, np.ndarray) and _one.shape == (1,), "a single response"
_star = tilted_optimum(worked.ref_probs, worked.reward_vector, 2)
assert _star.dtype == np.float64 and np.array_equal(_star, tilted_optimum(worked.ref_probs, worked.reward_vector, 2.0)), (
    "an int beta must give what the same float beta gives")
assert isinstance(kl_objective(_star, worked.ref_probs, worked.reward_vector, 2), float)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_tilted_optimum_edge", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 4, extreme inputs: very small beta, responses pi_ref never writes, policies that skip responses.
# Small beta: e^(r / beta) is e^2000 here, far beyond the largest float (about e^709).
with np.errstate(all="ignore"):
    _star = tilted_optimum(worked.ref_probs, worked.reward_vector, 1e-3)
assert np.all(np.isfinite(_star)), (
    f"beta = 0.001 gave {_star}: e^(r / beta) overflowed. Work in log space: log pi_ref + r / beta, "
    "subtract the largest entry, exponentiate, normalise")
# A response pi_ref never writes keeps probability 0, however large its reward.
with np.errstate(all="ignore"):
    _star = tilted_optimum(np.array([0.5, 0.0, 0.5]), np.array([0.0, 3.0, 1.0]), 0.05)
assert np.all(np.isfinite(_star)) and _star[1] == 0, (
    f"pi_ref = 0 must stay exactly 0 in pi*, got {_star}: log 0 = -inf is the right log-probability (no + 1e-12)")
# A policy that never writes some responses: 0 log 0 counts as 0 in the KL.
with np.errstate(all="ignore"):
    _j = kl_objective(np.array([0.0, 0.0, 0.0, 1.0]), worked.ref_probs, worked.reward_vector, 0.5)
assert np.isfinite(_j), (
    f"J of the policy (0, 0, 0, 1) is {_j}: 0 * log 0 is nan in floating point, but counts as 0 in the KL. "
    "Sum only over the responses the policy gives probability > 0")
print("visible tests for task 4 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# Small beta: all mass on the best response ("by"), exactly.
for _beta in (1e-3, 1e-6):
    _star = tilted_optimum(worked.ref_probs, worked.reward_vector, _beta)
    assert np.allclose(_star, [0, 0, 0, 1], atol=1e-9), f"beta = {_beta}: pi* should be one-hot on 'by', got {_star}"
_star = tilted_optimum(np.array([0.5, 0.0, 0.5]), np.array([0.0, 50.0, 1.0]), 0.1)
assert np.all(np.isfinite(_star)) and _star[1] == 0 and abs(_star.sum() - 1) < 1e-12
# Hand value of J for a one-hot policy (0 log 0 = 0): J = 2 - beta log(1 / 0.15).
_j = kl_objective(np.array([0.0, 0.0, 0.0, 1.0]), worked.ref_probs, worked.reward_vector, 0.5)
assert abs(_j - (2 - 0.5 * math.log(1 / 0.15))) < 1e-9, f"J of the one-hot policy on 'by': got {_j}"
### END HIDDEN TESTS


# %% [markdown]
# ## Task 5: the same optimum, one token at a time
#
# A language model does not pick a whole response at once; it picks one token, then the next. Can
# a token-by-token policy reach $\pi^*$? Yes, if each choice looks ahead through a **soft value**.
# For the toy LM, after first token $i$ the second token $j$ ends the response with reward
# $r_{ij}$, and
#
# $$V(i) = \beta \log \sum_j \pi_{\text{ref}}(j \mid i)\, e^{r_{ij}/\beta}$$
#
# is a "soft maximum" of the rewards reachable from $i$: close to the average reward for large
# $\beta$, close to the best one for small $\beta$. Then
#
# $$\pi^*(j \mid i) = \pi_{\text{ref}}(j \mid i)\, e^{(r_{ij} - V(i))/\beta}, \qquad
#   \pi^*(i) \propto \pi_{\text{ref}}(i)\, e^{V(i)/\beta},$$
#
# i.e. the second token is tilted by its reward and the first by the value of where it leads
# (the first step is `tilted_optimum` with the values as rewards). Their product is exactly the
# $\pi^*$ of Task 4. In the worked example at $\beta = 1$: $V(a) = \log(0.6 + 0.4e) \approx 0.523$
# and $V(b) = \log(0.5 + 0.5e^2) \approx 1.434$.
#
# Compute $V$ with a stable log-sum-exp (`np.logaddexp.reduce(x, axis=...)`), for the same reason
# as in Task 4.


# %% nbgrader={"grade": false, "grade_id": "task5_token_level_optimum", "locked": false, "schema_version": 3, "solution": true, "task": false}
def token_level_optimum(first_probs: np.ndarray, second_probs: np.ndarray, rewards: np.ndarray, beta: float):
    """pi* of a two-token toy LM built backwards with soft values.

    first_probs:  float [A], pi_ref(i) of the first token
    second_probs: float [A, B], row i is pi_ref(j | i)
    rewards:      float [A, B], reward of the response (i, j)
    beta:         float > 0
    returns:      (pi_first [A], pi_second [A, B], values [A]) with values[i] = V(i)
    """
    ### BEGIN SOLUTION
    with np.errstate(divide="ignore"):
        log_second = np.log(np.asarray(second_probs, dtype=float))
    scaled = log_second + np.asarray(rewards, dtype=float) / beta         # [A, B]
    values = beta * np.logaddexp.reduce(scaled, axis=1)                    # [A]
    pi_second = np.exp(scaled - values[:, None] / beta)                    # rows sum to 1
    pi_first = tilted_optimum(first_probs, values, beta)
    return pi_first, pi_second, values
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task5_token_level_optimum_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 5, values: soft values and the token-level pi* on the worked example.
worked = toylm.scenario("worked")
_first, _second, _values = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1.0)
print("V(a), V(b) =", np.round(_values, 5), " expected:", EXPECTED["worked_soft_values"])
assert np.allclose(_values, EXPECTED["worked_soft_values"], atol=1e-3), "soft values of the worked example at beta = 1"
assert np.allclose(np.sum(_second, axis=1), 1), "each row of pi*(j | i) is a distribution"
assert np.allclose((np.asarray(_first)[:, None] * _second).ravel(), EXPECTED["worked_pi_star"], atol=1e-3), (
    "the product must be the pi* of Task 4")
# beta = 0.5, by hand: V(a) = 0.5 log(0.6 + 0.4 e^2), V(b) = 0.5 log(0.5 + 0.5 e^4).
_, _, _values = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 0.5)
_want = np.array([0.5 * math.log(0.6 + 0.4 * math.e ** 2), 0.5 * math.log(0.5 + 0.5 * math.e ** 4)])
assert np.allclose(_values, _want, atol=1e-6), (
    f"beta = 0.5: expected V = {np.round(_want, 4)}, got {np.round(_values, 4)}. "
    "V(i) = beta * log sum_j pi_ref(j | i) e^(r_ij / beta): the factor beta in front matters once beta != 1")
print("visible tests for task 5 (values) passed")

### BEGIN HIDDEN TESTS
# Random two-token problems: the product equals the whole-response optimum (library version).
_rng = np.random.default_rng(1)
for _ in range(20):
    _A, _B = _rng.integers(1, 5, size=2)
    _f = _rng.dirichlet(np.ones(_A))
    _s = _rng.dirichlet(np.ones(_B), size=_A)
    _r = _rng.normal(size=(_A, _B)) * 2
    _beta = float(_rng.uniform(0.05, 4))
    _pf, _ps, _v = token_level_optimum(_f, _s, _r, _beta)
    assert np.allclose((_pf[:, None] * _ps).ravel(),
                       toylm.tilted_optimum((_f[:, None] * _s).ravel(), _r.ravel(), _beta), atol=1e-9)
    assert np.allclose(_v, toylm.soft_values(_s, _r, _beta), atol=1e-9)
_, _, _v = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1e4)
assert np.allclose(_v, [0.4, 1.0], atol=1e-3), f"large beta: V(i) is the mean reward after i, got {_v}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task5_token_level_optimum_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 5, types, shapes and inputs: a tuple of three numpy arrays [A], [A, B], [A], for any A and B
# (one first token included), the inputs untouched.
_f = np.array([0.2, 0.5, 0.3])
_sp = np.array([[0.5, 0.5], [0.9, 0.1], [0.3, 0.7]])
_r = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
_copies = (_f.copy(), _sp.copy(), _r.copy())
_out = token_level_optimum(_f, _sp, _r, 0.5)
assert isinstance(_out, tuple) and len(_out) == 3, f"return a tuple (pi_first, pi_second, values), got {type(_out).__name__}"
assert all(isinstance(x, np.ndarray) for x in _out), f"each part is a numpy array, got {[type(x).__name__ for x in _out]}"
assert [x.shape for x in _out] == [(3,), (3, 2), (3,)], (
    f"A = 3 first tokens, B = 2 second ones: expected shapes [(3,), (3, 2), (3,)], got {[x.shape for x in _out]}")
assert all(np.array_equal(a, b) for a, b in zip((_f, _sp, _r), _copies)), (
    "token_level_optimum changed the caller's arrays (np.asarray does not copy: `rewards /= beta` divides the "
    "caller's rewards); compute into new arrays")
_out = token_level_optimum(np.array([1.0]), np.array([[0.25, 0.75]]), np.array([[0.0, 1.0]]), 1.0)
assert [np.shape(x) for x in _out] == [(1,), (1, 2), (1,)], (
    f"one first token: expected shapes [(1,), (1, 2), (1,)], got {[np.shape(x) for x in _out]}: keep every axis "
    "(no np.squeeze)")
print("visible tests for task 5 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = token_level_optimum(np.array([0.5, 0.5]), np.array([[1.0], [1.0]]), np.array([[0.0], [3.0]]), 1.0)
assert [np.shape(x) for x in _out] == [(2,), (2, 1), (2,)], "one second token (B = 1)"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task5_token_level_optimum_edge", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 5, extreme inputs: small beta, and rows whose rewards lie far apart.
with np.errstate(all="ignore"):
    _out = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1e-3)
assert all(np.all(np.isfinite(x)) for x in _out), (
    "beta = 0.001 gave inf or nan: compute V(i) with np.logaddexp.reduce(log pi_ref(j | i) + r_ij / beta, axis=1) "
    "times beta, never with exp(r / beta)")
# Row 0's rewards are near 0, row 1's near 100: at beta = 0.01, r / beta is 0 in one row and 10,000 in the other.
with np.errstate(all="ignore"):
    _out = token_level_optimum(np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.5, 0.5]]),
                               np.array([[0.0, 1.0], [100.0, 101.0]]), 0.01)
assert all(np.all(np.isfinite(x)) for x in _out), (
    f"rows with very different rewards at beta = 0.01 gave V = {_out[2]}: each row's log-sum-exp must be stable "
    "on its own (shift each row by its own maximum, or use np.logaddexp.reduce along axis=1)")
print("visible tests for task 5 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
assert np.allclose(_out[2], [1.0 + 0.01 * math.log(0.5), 101.0 + 0.01 * math.log(0.5)], atol=1e-6), _out[2]
# Small beta: V(i) -> the best reward after i and pi* one-hot; large beta: V(i) -> the mean reward.
_pf, _ps, _v = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1e-3)
assert np.allclose(_v, [1.0, 2.0], atol=0.01) and np.allclose(_pf, [0, 1], atol=1e-9), f"beta = 1e-3: V = {_v}, pi*(first) = {_pf}"
assert np.allclose(_ps, [[0, 1], [0, 1]], atol=1e-9), f"beta = 1e-3: pi*(j | i) should pick the better second token, got {_ps}"
# A second token pi_ref never writes stays at 0.
_pf, _ps, _v = token_level_optimum(np.array([1.0]), np.array([[0.5, 0.0, 0.5]]), np.array([[0.0, 9.0, 1.0]]), 0.5)
assert _ps[0, 1] == 0 and np.all(np.isfinite(_ps))
### END HIDDEN TESTS


# %% [markdown]
# ## Experiment 1: temperature trades accuracy for diversity
#
# Now the real model: the course's SFT TinyLM (about 100k parameters) after supervised training on
# additions like `37+48=85`. We ask it 200 fixed two-digit problems, 8 samples each, at several
# temperatures, with **your** `sample_with_temperature` choosing every token, and count how often
# it is right and how many different answers the 8 samples give. An answer is a number: a hot
# sample such as `8+5` or one with a stray padding token is malformed, no answer at all, and is
# not counted among the different answers (it still counts as wrong). The sweep runs three times, with
# seeds 0, 1 and 2 (each seed draws its own samples): the table gives the mean and the standard
# deviation over the seeds, the plot every seed as a thin line under the mean.

# %% tags=["nbval-mask-numbers"]
sft_model = load_checkpoint("sft", progress=False)
temperatures = (0.0, 1.0, 2.0) if grading_mode() else lab11.SWEEP_TEMPERATURES
SWEEP_ARGS = dict(n_problems=20 if grading_mode() else 200, n_samples=8, seeds=(0,) if grading_mode() else (0, 1, 2))
sweep = lab11.temperature_sweep_seeds(sft_model, temperatures, sampler=sample_with_temperature, **SWEEP_ARGS)
print(f"mean ± standard deviation over seeds {', '.join(map(str, sweep['seeds']))}")
for T, acc, acc_sd, d, d_sd in zip(sweep["temperature"], sweep["accuracy"], sweep["accuracy_std"],
                                   sweep["distinct_answers"], sweep["distinct_std"]):
    print(f"T = {T:4.2f}: accuracy {acc:.3f} ± {acc_sd:.3f}, distinct answers among 8: {d:.2f} ± {d_sd:.2f}")
lab11.plot_temperature_sweep(sweep)
plt.show()

# %% tags=["nbval-mask-numbers"]
# The same sweep with the course's reference sampler: a correct sampler may draw its tokens in
# another order, so the accuracies may differ by sampling noise, and by no more.
_ref = lab11.temperature_sweep_seeds(sft_model, temperatures, **SWEEP_ARGS)
_ok = live_checks.compare_rates("Experiment 1, accuracy at each temperature", sweep["accuracy"], _ref["accuracy"],
                                n=sweep["n_problems"] * sweep["n_samples"] * len(sweep["seeds"]),
                                task="Task 2 (`sample_with_temperature`)")

# %% [markdown]
# **Reading the plot.** Greedy decoding is the model's single best guess and is right most often.
# Raising `T` spreads probability onto less likely digits: accuracy falls at every step of the sweep
# while the number of different answers among 8 grows, to about 5 at `T = 2`. The seeds lie close
# together (the spread is a few hundredths at most; greedy decoding has none). RL needs that variety
# (a group of identical answers teaches nothing), but every bit of it is paid for in accuracy: this
# is the exploration knob of everything that follows.
#
# ## Experiment 2: how far does temperature move the policy?
#
# Sampling at temperature `T` is itself a policy, $\pi_T$, so we can ask how far it is from the
# model at `T = 1` (our $\pi_{\text{ref}}$). We sample batches of 16 prompts x 8 responses (the size
# of one RL step) from $\pi_T$, score them with **your** `response_logprobs` (logits divided by `T`
# for $\pi_T$, as they are for $\pi_{\text{ref}}$), turn the per-token log-ratios into k1 and k3 with
# **your** `kl_estimators`, and add them up over each response with **your** `sequence_logprob`.
# The truth comes from summing $\pi_T \log(\pi_T / \pi_{\text{ref}})$ over all 15 tokens at every
# position the responses visited. Each dot is one batch's estimate with its error bar (1.96 standard
# errors), divided by the truth.

# %% tags=["nbval-mask-numbers"]
KL_ARGS = dict(n_problems=4 if grading_mode() else 16, n_samples=8, n_batches=2 if grading_mode() else 16, seed=0,
               sampler=sample_with_temperature)
YOUR_KL_FUNCTIONS = dict(response_logprobs_fn=response_logprobs, sequence_logprob_fn=sequence_logprob,
                         kl_estimators_fn=kl_estimators)
kl = lab11.kl_estimates(sft_model, lab11.KL_TEMPERATURES, **KL_ARGS, **YOUR_KL_FUNCTIONS)
for T, row in lab11.kl_checks(kl).items():
    print(f"T = {T:4.2f}: exact KL {row['exact']:.3f} nats per response | median batch / exact: "
          f"k1 {row['k1_ratio']:.2f}, k3 {row['k3_ratio']:.2f} | bars covering the truth: "
          f"k1 {row['k1_covers']:.0%}, k3 {row['k3_covers']:.0%} | all batches pooled / exact: "
          f"k1 {row['k1_pooled_ratio']:.2f}, k3 {row['k3_pooled_ratio']:.2f}")
lab11.plot_kl_estimates(kl)
plt.show()

# %% tags=["nbval-mask-numbers"]
# The same batches (your sampler, same seeds) scored by the reference versions of Tasks 1a, 1b and
# 3: every number must agree. If not, each of your three functions is tried alone to find the culprits.
def _kl_numbers(**functions):
    k = lab11.kl_estimates(sft_model, lab11.KL_TEMPERATURES, **KL_ARGS, **functions)
    return np.concatenate([k["exact"], k["k1"], k["k2"], k["k3"]])


_yours = np.concatenate([kl["exact"], kl["k1"], kl["k2"], kl["k3"]])
_reference = _kl_numbers()
if not live_checks.compare_exact("Experiment 2, the exact KL and k1, k2, k3", _yours, _reference,
                                 task="Tasks 1a, 1b and 3", atol=1e-4):
    _tasks = {"Task 1a (`response_logprobs`)": "response_logprobs_fn", "Task 1b (`sequence_logprob`)": "sequence_logprob_fn",
              "Task 3 (`kl_estimators`)": "kl_estimators_fn"}
    _culprits = live_checks.differing("Experiment 2", {t: {k: YOUR_KL_FUNCTIONS[k]} for t, k in _tasks.items()},
                                      _kl_numbers, _reference)
    print("  each of these changes the numbers on its own: " + (", ".join(_culprits) or "none alone (look at them together)"))

# %% [markdown]
# **Reading the plot.** At `T = 2`, k1 and k3 both sit close to the exact value: their median batch
# is within a tenth of it. At `T = 1.5` the KL is small (about a quarter of a nat per response) and
# this draw of 16 batches is noisier: k1's median batch is 0.70 of the truth and k3's 0.82, yet most
# of their error bars (81%) still cover it. Draw again with another `seed` and those two move, while
# the pattern at `T = 0.25` stays. There k1 is close to the truth, but k3's median batch is well under
# half of it (about 0.45) and its error bars miss the truth in most batches, even though k3 is
# unbiased. Pooling all 16 batches does not rescue it either (about 0.6 of the truth). Where does the
# rest of its mean hide? In rare tokens. When $\pi_T$ is much sharper than $\pi_{\text{ref}}$, a
# token that $\pi_{\text{ref}}$ finds plausible but $\pi_T$ almost never draws has
# $e^{-\ell} = \pi_{\text{ref}} / \pi_T$ enormous; it turns up in few batches, and those batches'
# k3 shoots up (the dots far above 1). Only over very many batches does the mean come out right; the
# typical batch is too low, and its own error bar cannot know. RL sharpens the policy relative to its
# reference, so this is the regime training actually runs in. (The 16 batches of each temperature
# are one draw with seed 0 on different problems: their spread is the sampling noise this plot is
# about, so it shows every batch rather than a band over seeds.)
#
# ## Experiment 3: the reward-KL frontier
#
# Back to the toy LM, where everything is exact. Sweeping $\beta$ from large to small, **your**
# `tilted_optimum` traces the best reward reachable at each KL from the reference (solid). Changing
# the temperature is another way to move away from $\pi_{\text{ref}}$ (dotted), and we compare the
# two. The right panel uses the "hack" scenario: the reward being maximised is a learned proxy that
# scores one rare response (`bz`) far too highly; dashes mark what $\pi^*$ earns under the
# **true** reward.

# %%
frontier = lab11.frontier_data(optimum_fn=tilted_optimum)
for name in frontier:
    print(f"{name}: temperature stays below the frontier at every KL: "
          f"{bool(np.all(lab11.temperature_gap(frontier, name) >= -1e-9))}")
_peak = frontier["hack"]["peak"]
print(f"hack: the true reward of pi* peaks at KL {_peak['kl_nats']:.2f} nats (beta = {_peak['beta']:.2f})")
_read = lab11.frontier_readings(frontier)
print(f"worked: cooling pi_ref from T = 1 to T = {_read['worked']['cold_T']:g} takes its reward from "
      f"{_read['worked']['reward_T1']:.2f} to {_read['worked']['reward_cold']:.2f}")
_last = _read["hack"]["smallest_beta"]
print(f"hack: pi* at the peak: proxy reward {_peak['reward']:.2f}, true reward {_peak['true_reward']:.2f}; "
      f"at the smallest beta ({_last['beta']:g}, KL {_last['kl_nats']:.2f} nats): proxy reward "
      f"{_last['reward']:.2f}, true reward {_last['true_reward']:.2f}")
lab11.plot_frontier(frontier)
plt.show()

# %%
# The frontier with the reference tilted_optimum: the same betas, so the same curves.
_ref = lab11.frontier_data()
_ok = live_checks.compare_exact("Experiment 3, reward and KL of pi* along the frontier",
                                [frontier[n]["optimum"][k] for n in frontier for k in ("reward", "kl_nats")],
                                [_ref[n]["optimum"][k] for n in _ref for k in ("reward", "kl_nats")],
                                task="Task 4 (`tilted_optimum`)", atol=1e-6)

# %% [markdown]
# **Reading the plot.** Temperature never reaches the frontier, and it cannot: $\pi^*$ maximises
# reward minus $\beta$ KL, so any other policy with the same KL has no more reward. In "worked" it
# is worse than that: cooling the model moves it toward its likeliest response, `ax`, which has
# reward 0, so the reward falls, to nearly 0 at the coldest temperature. Temperature knows the
# model's preferences, not the reward. In "hack" the proxy reward keeps climbing as $\beta$ shrinks,
# to 2 at the smallest $\beta$, but the true reward peaks at about 0.5 nats and then falls, to 0, as
# $\pi^*$ moves onto `bz`. The KL penalty is the leash that keeps the policy where the reward model
# can still be trusted.
#
# ## What you should see
#
# The published numbers next to yours (under autograding the experiments are shrunk, so the
# numbers differ).

# %% tags=["nbval-mask-numbers"]
print(lab11.expected_report(sweep, kl, frontier))
print()
print(lab11.summary_line(sweep, kl, frontier))

# %% [markdown]
# ## Two sliders
#
# The temperature slider samples the SFT TinyLM at the chosen `T` (with your sampler) and shows the
# accuracy, how many different answers 8 samples give, and the samples for four problems
# (wrong ones in red). The beta slider shows $\pi^*$ of the toy LM (from your `tilted_optimum`)
# next to $\pi_{\text{ref}}$, and where it sits on the reward-KL frontier.

# %% tags=["nbval-ignore-output"]
display(lab11.temperature_widget(sft_model, sampler=sample_with_temperature))

# %% tags=["nbval-ignore-output"]
display(lab11.beta_widget("hack", optimum_fn=tilted_optimum, beta=1.0))

# %% [markdown]
# ## Going further (optional, not graded)
#
# Three small exercises. Each cell below marks its **TODO**; the check after it tells you whether
# you got what you should.
#
# **k2's bias.** Experiment 2 left k2 out of the plot. **TODO:** before you run the check, write
# down in `K2_GUESS` whether you expect k2's median batch estimate to come out below or above the
# exact KL at each temperature, then explain the pattern in a comment: why does $\ell^2/2$ behave
# differently when $\pi_T$ is sharper than $\pi_{\text{ref}}$ and when it is flatter? (Hint: expand
# k3 for small $\ell$ and compare term by term.) **What you should find:** k2 misses on both ends of
# the temperature range, on opposite sides of the truth.

# %%
K2_GUESS = {0.25: "?", 0.5: "?", 1.5: "?", 2.0: "?"}  # TODO: "below" or "above" the exact KL
# BEGIN MARK SCHEME
K2_GUESS = {0.25: "below", 0.5: "below", 1.5: "above", 2.0: "above"}
# Why: k3 = e^-l - 1 + l = l^2/2 - l^3/6 + ..., and E_pi[k3] is exactly the KL, so E[k2] - KL is
# about E[l^3] / 6: the sign of the third moment of l decides. A sharp pi_T mostly draws its
# favourite token (l a little above 0) and now and then one it has squeezed far below pi_ref
# (l far below 0): a negative tail, E[l^3] < 0, k2 too low. A flat pi_T often draws tokens pi_ref
# finds very unlikely (l far above 0): a positive tail, E[l^3] > 0, k2 too high.
# END MARK SCHEME

# %% tags=["nbval-mask-numbers"]
for T, row in lab11.kl_checks(kl).items():
    _side = "below" if row["k2_ratio"] < 1 else "above"
    print(f"T = {T:4.2f}: k2 / exact = {row['k2_ratio']:.2f} ({_side} the truth; you guessed {K2_GUESS.get(T, '?')})")

# %% [markdown]
# **Samples from an older policy.** PPO-style training draws its tokens from $\pi_{\text{old}}$,
# not from the $\pi$ it is updating, so plain k3 no longer averages to
# $\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}})$. **TODO:** write `weighted_k3`, which multiplies
# each token's k3 by the importance weight $\pi / \pi_{\text{old}}$ (use your `kl_estimators`).
# **What you should find:** averaged exactly over $y \sim \pi_{\text{old}}$ on the three tokens
# below, the weighted estimate equals the KL to five decimals and the plain one does not. Then try
# other distributions.


# %%
def weighted_k3(logp, logp_old, logp_ref):
    """Per-token k3 of KL(pi || pi_ref) for tokens sampled from pi_old, times pi / pi_old; shapes like logp."""
    # BEGIN MARK SCHEME
    return torch.exp(logp - logp_old) * kl_estimators(logp, logp_ref)[2]
    # END MARK SCHEME
    raise NotImplementedError("optional: write weighted_k3")


# %%
_pi = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
_ref = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
_old = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
_kl_exact = float((_pi * (_pi / _ref).log()).sum())
print(f"KL(pi || ref)                  = {_kl_exact:.5f}")
print(f"E_old[k3], plain               = {float((_old * kl_estimators(_pi.log(), _ref.log())[2]).sum()):.5f}")
try:
    _w = float((_old * weighted_k3(_pi.log(), _old.log(), _ref.log())).sum())
    print(f"E_old[weighted k3]             = {_w:.5f}  ->", "unbiased, as it should be" if abs(_w - _kl_exact) < 1e-9
          else "not the KL yet: check the weight (pi / pi_old, not pi_old / pi)")
except NotImplementedError:
    print("weighted_k3 is not written yet (optional)")

# %% [markdown]
# **The best beta for the true reward.** In "hack", the proxy reward of $\pi^*$ keeps rising as
# $\beta$ shrinks while the true reward turns down. **TODO:** sweep $\beta$ over a grid with your
# `tilted_optimum`, find the $\beta$ where $\pi^*$ earns the most *true* reward, and report the
# proxy reward $\pi^*$ shows there. The scenario's arrays: `ref_probs`, `reward_vector` (the proxy)
# and `true_rewards` (shape `[A, B]`, flatten it). **What you should find:** the same $\beta$ as the
# peak printed under Experiment 3 (about 0.6), and a proxy reward there well below what smaller
# $\beta$ promise.


# %%
def best_beta_for_true_reward(scenario, betas):
    """(beta, true reward, proxy reward) of the pi* with the most true reward among `betas`."""
    # BEGIN MARK SCHEME
    true = scenario.true_rewards.ravel()
    best = max(betas, key=lambda b: tilted_optimum(scenario.ref_probs, scenario.reward_vector, b) @ true)
    star = tilted_optimum(scenario.ref_probs, scenario.reward_vector, best)
    return float(best), float(star @ true), float(star @ scenario.reward_vector)
    # END MARK SCHEME
    raise NotImplementedError("optional: write best_beta_for_true_reward")


# %%
_betas = np.geomspace(0.05, 20, 400)
try:
    _b, _true, _proxy = best_beta_for_true_reward(toylm.scenario("hack"), _betas)
    _small = tilted_optimum(toylm.scenario("hack").ref_probs, toylm.scenario("hack").reward_vector, 0.05)
    print(f"best beta {_b:.3f}: true reward {_true:.3f}, proxy reward {_proxy:.3f}; "
          f"at beta = 0.05 the proxy promises {_small @ toylm.scenario('hack').reward_vector:.3f}")
    print("matches the peak of Experiment 3:", abs(np.log(_b / frontier["hack"]["peak"]["beta"])) < 0.05)
except NotImplementedError:
    print("best_beta_for_true_reward is not written yet (optional)")
