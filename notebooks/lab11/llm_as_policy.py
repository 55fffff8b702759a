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
# A language model that writes a response one token at a time is a policy: the state is the
# prompt plus the tokens written so far, the action is the next token, and
# $\pi_\theta(y \mid x) = \prod_t \pi_\theta(y_t \mid x, y_{<t})$.
# Every RL algorithm for language models in the coming chapters needs $\log \pi_\theta(y \mid x)$,
# and that number is easy to get subtly wrong. In this lab you write the plumbing that computes it
# and then use it to study temperature, KL estimators and the KL-regularized optimum.
#
# Fill in each cell that says `raise NotImplementedError()`, then run the test cell below it.
# The visible tests catch most mistakes; the grader runs a few more.
#
# Tensor names: `B` batch, `T` tokens (prompt and response together), `V` vocabulary,
# `R = T - prompt_len` response tokens.

# %%
import math

import torch

from llmrl.utils import set_threads

set_threads(1)  # one thread: reproducible and, at this size, the fastest

# %% [markdown]
# ## Task 1a: log-probabilities of the response tokens
#
# A causal language model reads `tokens[:, :T]` and returns `logits` of shape `[B, T, V]`.
# The logits at **column t** are the model's prediction for the token at **column t + 1**:
# they were computed from `tokens[:, :t+1]` only. So the token at column `t` is scored by the
# logits at column `t - 1`, the first token has no score, and the last column of logits
# predicts a token that has not been written yet.
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
# Draw the table for your own shapes on paper before you write the slice: this one line is the
# one people get wrong in real training code.


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


# %% nbgrader={"grade": true, "grade_id": "test_task1a_response_logprobs", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Shape: only the response part.
_g = torch.Generator().manual_seed(0)
_logits = torch.randn(2, 6, 5, generator=_g)
_tokens = torch.randint(0, 5, (2, 6), generator=_g)
_out = response_logprobs(_logits, _tokens, prompt_len=2)
assert _out.shape == (2, 4), f"expected shape [B, T - prompt_len] = (2, 4), got {tuple(_out.shape)}"
assert _out.dtype == torch.float32, f"expected float log-probs, got {_out.dtype}"
assert (_out <= 0).all(), "log-probabilities can never be positive: did you apply log_softmax?"

# Uniform logits: every token has probability 1/V, whatever the shift.
_out = response_logprobs(torch.zeros(1, 5, 4), torch.tensor([[0, 1, 2, 3, 0]]), prompt_len=1)
assert torch.allclose(_out, torch.full((1, 4), -math.log(4))), f"uniform logits over 4 tokens: expected -log 4 each, got {_out}"
print("visible tests for task 1a passed")

### BEGIN HIDDEN TESTS
# The 4-column hand example: column c of the logits holds log(probs[c]) plus a constant, so
# forgetting log_softmax, scoring with the unshifted column or shifting the wrong way all fail.
_probs = torch.tensor([[0.50, 0.25, 0.25],   # column 0 scores column 1 (prompt)
                       [0.10, 0.60, 0.30],   # column 1 scores y2 = 1 -> 0.6
                       [0.20, 0.10, 0.70],   # column 2 scores y3 = 2 -> 0.7
                       [0.40, 0.40, 0.20]])  # column 3 scores nothing
_logits = (_probs.log() + torch.tensor([[1.0], [2.0], [-3.0], [0.5]])).unsqueeze(0)
_out = response_logprobs(_logits, torch.tensor([[0, 2, 1, 2]]), prompt_len=2)
assert torch.allclose(_out, torch.tensor([[0.6, 0.7]]).log(), atol=1e-6), f"hand example: expected log([0.6, 0.7]), got {_out}"

# Against a plain loop, on a batch with several prompt lengths.
for _p in (1, 3, 6):
    _logits = torch.randn(3, 7, 5, generator=_g)
    _tokens = torch.randint(0, 5, (3, 7), generator=_g)
    _want = torch.tensor([[torch.log_softmax(_logits[b, t - 1], -1)[_tokens[b, t]].item() for t in range(_p, 7)]
                          for b in range(3)])
    _got = response_logprobs(_logits, _tokens, prompt_len=_p)
    assert _got.shape == _want.shape and torch.allclose(_got, _want, atol=1e-5), f"prompt_len={_p}: wrong values"

# Only the logits that score response tokens get a gradient: none for the columns that score
# prompt tokens, none for the last column.
_logits = torch.randn(2, 6, 5, generator=_g, requires_grad=True)
response_logprobs(_logits, torch.randint(0, 5, (2, 6), generator=_g), prompt_len=3).sum().backward()
_gnorm = _logits.grad.abs().sum(dim=(0, 2))
assert (_gnorm[:2] == 0).all() and _gnorm[5] == 0, f"gradient reached logits that score no response token: {_gnorm}"
assert (_gnorm[2:5] > 0).all(), f"logits columns 2-4 score the response and need a gradient: {_gnorm}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task1b_sequence_logprob", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_lp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]])
_mask = torch.tensor([[True, True, False], [True, True, True]])
_out = sequence_logprob(_lp, _mask)
assert _out.shape == (2,), f"expected one number per response, shape (2,), got {tuple(_out.shape)}"
assert torch.allclose(_out, torch.tensor([-1.5, -0.6])), f"expected [-1.5, -0.6], got {_out}"
print("visible tests for task 1b passed")

### BEGIN HIDDEN TESTS
# -inf at a padding position must not turn into nan (it does with `* mask`).
_lp = torch.tensor([[-0.5, -float("inf")], [-1.0, -2.0]], requires_grad=True)
_out = sequence_logprob(_lp, torch.tensor([[True, False], [True, True]]))
assert not torch.isnan(_out).any(), f"nan in the result: padding must be selected away, not multiplied by 0: {_out}"
assert torch.allclose(_out, torch.tensor([-0.5, -3.0])), f"expected [-0.5, -3.0], got {_out}"
_out.sum().backward()
assert not torch.isnan(_lp.grad).any(), f"nan in the gradient: {_lp.grad}"
assert torch.equal(_lp.grad, torch.tensor([[1.0, 0.0], [1.0, 1.0]])), f"padding must get no gradient: {_lp.grad}"

# An all-padding row sums to 0; the input is left as it was.
_lp = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
_before = _lp.clone()
_mask = torch.tensor([[False] * 4, [True, False, True, False], [True] * 4])
_out = sequence_logprob(_lp, _mask)
assert torch.allclose(_out, torch.stack([torch.tensor(0.0), _lp[1, 0] + _lp[1, 2], _lp[2].sum()]))
assert torch.equal(_lp, _before), "sequence_logprob must not modify its input"
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
