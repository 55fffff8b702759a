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
# | task | you write | points |
# |---|---|---|
# | 1a | `response_logprobs`: the log-prob of each response token (the shift) | 3 |
# | 1b | `sequence_logprob`: the log-prob of a whole response (the mask) | 2 |
# | 2 | `sample_with_temperature` | 3 |
# | 3 | `kl_estimators`: k1, k2, k3 | 3 |
# | 4 | `tilted_optimum` and `kl_objective`: the KL-regularized optimum $\pi^*$ | 4 |
# | 5 | `token_level_optimum`: $\pi^*$ one token at a time, with soft values | 3 |
#
# Three experiments then run on your functions: temperature on a small trained model, KL estimates
# against the exact KL, and the reward-KL frontier of a toy model small enough to enumerate.
#
# Fill in each cell that says `raise NotImplementedError()`, then run the test cell below it.
# The visible tests catch most mistakes; the grader runs a few more.
#
# Tensor names: `B` batch, `T` tokens (prompt and response together), `V` vocabulary,
# `R = T - prompt_len` response tokens.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from llmrl import toylm
from llmrl.checkpoints import load_checkpoint
from llmrl.labs import lab11
from llmrl.labs.lab11 import EXPECTED
from llmrl.utils import grading_mode, set_threads

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


# %% nbgrader={"grade": true, "grade_id": "test_task2_sample_with_temperature", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_z = torch.tensor([[2.0, 0.0, -1.0, 1.0], [0.0, 0.5, 3.0, 0.0]])
_out = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(0))
assert _out.shape == (2,) and _out.dtype == torch.long, f"expected a long tensor of shape (2,), got {_out.dtype} {tuple(_out.shape)}"
assert torch.equal(sample_with_temperature(_z, 0.0), torch.tensor([0, 2])), "T = 0 must pick the argmax of each row"

# At T = 1 the frequencies of many draws match softmax(z).
_z = torch.tensor([1.0, 0.0, -1.0, 0.5])
_draws = sample_with_temperature(_z.expand(20000, 4), 1.0, torch.Generator().manual_seed(1))
_freq = torch.bincount(_draws, minlength=4) / 20000
assert torch.allclose(_freq, torch.softmax(_z, -1), atol=0.015), f"T = 1: frequencies {_freq} differ from softmax(z) {torch.softmax(_z, -1)}"
print("visible tests for task 2 passed")

### BEGIN HIDDEN TESTS
# T = 0 on a batch, with -inf logits (banned tokens) and large values: argmax, no nan, no error.
_z = torch.randn(64, 15, generator=torch.Generator().manual_seed(2)) * 20
_z[:, 3] = -float("inf")
assert torch.equal(sample_with_temperature(_z, 0.0), _z.argmax(-1)), "T = 0 must be the argmax"
assert torch.equal(sample_with_temperature(_z, 0), _z.argmax(-1)), "T = 0 given as an int must be the argmax too"

# T = 0.5 divides the logits by T (it does not multiply them).
_z = torch.tensor([1.0, 0.0, -1.0, 0.5])
_draws = sample_with_temperature(_z.expand(20000, 4), 0.5, torch.Generator().manual_seed(3))
_freq = torch.bincount(_draws, minlength=4) / 20000
assert torch.allclose(_freq, torch.softmax(_z / 0.5, -1), atol=0.015), f"T = 0.5: frequencies {_freq}, expected {torch.softmax(_z / 0.5, -1)}"
# Very small T is almost greedy; very large T is almost uniform.
assert (sample_with_temperature(_z.expand(2000, 4), 0.01, torch.Generator().manual_seed(4)) == 0).all()
_freq = torch.bincount(sample_with_temperature(_z.expand(20000, 4), 100.0, torch.Generator().manual_seed(5)), minlength=4) / 20000
assert torch.allclose(_freq, torch.full((4,), 0.25), atol=0.02), f"T = 100 should be close to uniform, got {_freq}"
# The generator is used: the same seed gives the same samples, another seed other samples.
_z = torch.randn(200, 15, generator=torch.Generator().manual_seed(6))
_a = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(7))
_b = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(7))
_c = sample_with_temperature(_z, 1.0, torch.Generator().manual_seed(8))
assert torch.equal(_a, _b) and not torch.equal(_a, _c), "pass the generator to torch.multinomial"
# A negative temperature is an error.
try:
    sample_with_temperature(_z, -1.0)
except ValueError:
    pass
else:
    raise AssertionError("a negative temperature must raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## Task 3: three ways to estimate a KL from samples
#
# RL for language models keeps the policy $\pi$ close to a reference $\pi_{\text{ref}}$ (usually
# the SFT model) by penalising $\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}}) = \mathbb{E}_{y \sim \pi}
# [\log \pi(y) - \log \pi_{\text{ref}}(y)]$. Summing over the whole vocabulary at every position
# is possible for our 15-token model but not for a 150,000-token one, so training code estimates
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


# %% nbgrader={"grade": true, "grade_id": "test_task3_kl_estimators", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# A token with pi = 0.5 and pi_ref = 0.25: l = log 2.
_k1, _k2, _k3 = kl_estimators(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
assert torch.allclose(_k1, torch.tensor([math.log(2)])), f"k1 = l = log 2, got {_k1}"
assert torch.allclose(_k2, torch.tensor([math.log(2) ** 2 / 2])), f"k2 = l^2 / 2, got {_k2}"
assert torch.allclose(_k3, torch.tensor([0.5 - 1 + math.log(2)])), f"k3 = e^(-l) - 1 + l = 0.193..., got {_k3}"
# Shapes are kept, and k3 is never negative.
_lp = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
_ks = kl_estimators(_lp, torch.zeros(4, 5))
assert all(k.shape == (4, 5) for k in _ks), "each estimator has the shape of its inputs"
assert (_ks[2] >= 0).all(), "k3 can never be negative"
print("visible tests for task 3 passed")

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
# Equal log-probs: every estimator is 0. The inputs are not modified.
_a, _b = torch.randn(3, 4), torch.randn(3, 4)
_a0, _b0 = _a.clone(), _b.clone()
assert all(torch.allclose(k, torch.zeros(3, 4)) for k in kl_estimators(_a, _a.clone()))
kl_estimators(_a, _b)
assert torch.equal(_a, _a0) and torch.equal(_b, _b0), "kl_estimators must not modify its inputs"
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


# %% nbgrader={"grade": true, "grade_id": "test_task4_tilted_optimum", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
worked = toylm.scenario("worked")
print("responses:", worked.responses, " pi_ref:", worked.ref_probs, " rewards:", worked.reward_vector)
_star = tilted_optimum(worked.ref_probs, worked.reward_vector, 1.0)
print("pi* at beta = 1:", np.round(_star, 5), " expected:", EXPECTED["worked_pi_star"])
assert _star.shape == (4,) and abs(_star.sum() - 1) < 1e-9, "pi* is a distribution over the 4 responses"
assert np.allclose(_star, EXPECTED["worked_pi_star"], atol=1e-3), "pi* of the worked example at beta = 1"
# J(pi_ref) is just the expected reward (no KL); J(pi*) is larger.
_j_ref = kl_objective(worked.ref_probs, worked.ref_probs, worked.reward_vector, 1.0)
assert abs(_j_ref - 0.58) < 1e-9, f"J(pi_ref) = E_ref[r] = 0.58, got {_j_ref}"
assert kl_objective(_star, worked.ref_probs, worked.reward_vector, 1.0) > _j_ref
print("visible tests for task 4 passed")

### BEGIN HIDDEN TESTS
# Small beta: no overflow, all mass on the best response ("by").
for _beta in (1e-3, 1e-6):
    _star = tilted_optimum(worked.ref_probs, worked.reward_vector, _beta)
    assert np.all(np.isfinite(_star)), f"beta = {_beta}: pi* has inf or nan; work in log space"
    assert np.allclose(_star, [0, 0, 0, 1], atol=1e-9), f"beta = {_beta}: pi* should be one-hot on 'by', got {_star}"
# Large beta: pi* stays at pi_ref. A response pi_ref never writes stays at 0.
assert np.allclose(tilted_optimum(worked.ref_probs, worked.reward_vector, 1e6), worked.ref_probs, atol=1e-5)
_star = tilted_optimum(np.array([0.5, 0.0, 0.5]), np.array([0.0, 50.0, 1.0]), 0.1)
assert np.all(np.isfinite(_star)) and _star[1] == 0 and abs(_star.sum() - 1) < 1e-12
# Hand value of J for a one-hot policy (0 log 0 = 0): J = 2 - beta log(1 / 0.15).
_j = kl_objective(np.array([0.0, 0.0, 0.0, 1.0]), worked.ref_probs, worked.reward_vector, 0.5)
assert abs(_j - (2 - 0.5 * math.log(1 / 0.15))) < 1e-9, f"J of the one-hot policy on 'by': got {_j}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task5_token_level_optimum", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
worked = toylm.scenario("worked")
_first, _second, _values = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1.0)
print("V(a), V(b) =", np.round(_values, 5), " expected:", EXPECTED["worked_soft_values"])
assert np.allclose(_values, EXPECTED["worked_soft_values"], atol=1e-3), "soft values of the worked example at beta = 1"
assert _first.shape == (2,) and _second.shape == (2, 2)
assert np.allclose(_second.sum(axis=1), 1), "each row of pi*(j | i) is a distribution"
assert np.allclose((_first[:, None] * _second).ravel(), EXPECTED["worked_pi_star"], atol=1e-3), "the product must be the pi* of Task 4"
print("visible tests for task 5 passed")

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
# Small beta: V(i) -> the best reward after i, no overflow; large beta: V(i) -> the mean reward.
_pf, _ps, _v = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1e-3)
assert np.all(np.isfinite(_v)) and np.all(np.isfinite(_ps)) and np.all(np.isfinite(_pf)), "beta = 1e-3 overflowed: use a stable log-sum-exp"
assert np.allclose(_v, [1.0, 2.0], atol=0.01) and np.allclose(_pf, [0, 1], atol=1e-9)
_, _, _v = token_level_optimum(worked.first_probs, worked.second_probs, worked.rewards, 1e4)
assert np.allclose(_v, [0.4, 1.0], atol=1e-3), f"large beta: V(i) is the mean reward after i, got {_v}"
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
# it is right and how many different answers the 8 samples give.

# %%
sft_model = load_checkpoint("sft", progress=False)
temperatures = (0.0, 1.0, 2.0) if grading_mode() else lab11.SWEEP_TEMPERATURES
sweep = lab11.temperature_sweep(sft_model, temperatures, n_problems=20 if grading_mode() else 200,
                                n_samples=8, seed=0, sampler=sample_with_temperature)
for T, acc, d in zip(sweep["temperature"], sweep["accuracy"], sweep["distinct_answers"]):
    print(f"T = {T:4.2f}: accuracy {acc:.3f}, distinct answers among 8: {d:.2f}")
lab11.plot_temperature_sweep(sweep)
plt.show()

# %% [markdown]
# Greedy decoding is the model's single best guess and is right most often. Raising `T` spreads
# probability onto the second and third most likely digits: the answers get more varied and more
# often wrong. RL needs that variety (a group of identical answers teaches nothing), but every bit
# of it is paid for in accuracy: this is the exploration knob of everything that follows.
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

# %%
kl = lab11.kl_estimates(sft_model, lab11.KL_TEMPERATURES, n_problems=4 if grading_mode() else 16, n_samples=8,
                        n_batches=2 if grading_mode() else 16, seed=0, sampler=sample_with_temperature,
                        response_logprobs_fn=response_logprobs, sequence_logprob_fn=sequence_logprob,
                        kl_estimators_fn=kl_estimators)
for T, row in lab11.kl_checks(kl).items():
    print(f"T = {T:4.2f}: exact KL {row['exact']:.3f} nats per response | median batch / exact: "
          f"k1 {row['k1_ratio']:.2f}, k3 {row['k3_ratio']:.2f} | bars covering the truth: "
          f"k1 {row['k1_covers']:.0%}, k3 {row['k3_covers']:.0%}")
lab11.plot_kl_estimates(kl)
plt.show()

# %% [markdown]
# For `T > 1` both estimators land on the truth. At `T = 0.25` k1 is still fine, but k3 is
# typically about half of the truth and its error bars miss it in half of the batches or more, even
# though k3 is unbiased. Where does the rest of its mean hide? In rare tokens. When $\pi_T$ is much
# sharper than $\pi_{\text{ref}}$, a token that $\pi_{\text{ref}}$ finds plausible but $\pi_T$ almost
# never draws has $e^{-\ell} = \pi_{\text{ref}} / \pi_T$ enormous; it turns up once in many
# batches, and that batch's k3 shoots up (the few dots far above 1). The average over all batches
# is right; the typical batch is not, and its own error bar cannot know. RL sharpens the policy
# relative to its reference, so this is the regime training actually runs in.
#
# ## Experiment 3: the reward-KL frontier
#
# Back to the toy LM, where everything is exact. Sweeping $\beta$ from large to small, **your**
# `tilted_optimum` traces the best reward reachable at each KL from the reference (solid). Changing
# the temperature is another way to move away from $\pi_{\text{ref}}$ (dotted), and we compare the
# two. The right panel uses the "hack" scenario: the reward being maximised is a learned proxy that
# scores one rare response (`bz`) far too highly; the dashed curve is the **true** reward of
# $\pi^*$.

# %%
frontier = lab11.frontier_data(optimum_fn=tilted_optimum)
for name in frontier:
    print(f"{name}: temperature stays below the frontier at every KL: "
          f"{bool(np.all(lab11.temperature_gap(frontier, name) >= -1e-9))}")
_peak = frontier["hack"]["peak"]
print(f"hack: the true reward of pi* peaks at KL {_peak['kl_nats']:.2f} nats (beta = {_peak['beta']:.2f})")
lab11.plot_frontier(frontier)
plt.show()

# %% [markdown]
# Temperature never reaches the frontier, and it cannot: $\pi^*$ maximises reward minus
# $\beta$ KL, so any other policy with the same KL has no more reward. In "worked" it is worse than
# that: cooling the model moves it toward its likeliest response, `ax`, which has reward 0, so the
# reward falls. Temperature knows the model's preferences, not the reward. In "hack" the proxy
# reward keeps climbing as $\beta$ shrinks, but the true reward peaks at about half a nat and then
# falls as $\pi^*$ moves onto `bz`. The KL penalty is the leash that keeps the policy where the
# reward model can still be trusted.
#
# ## What you should see
#
# The handout's numbers next to yours (under autograding the experiments are shrunk, so the
# numbers differ).

# %%
print(lab11.expected_report(sweep, kl, frontier))
print()
print(lab11.summary_line(sweep, kl, frontier))

# %% [markdown]
# ## Two sliders
#
# The temperature slider samples the SFT TinyLM at the chosen `T` (with your sampler) and shows the
# accuracy, the number of distinct answers among 8 samples, and the samples for four problems
# (wrong ones in red). The beta slider shows $\pi^*$ of the toy LM (from your `tilted_optimum`)
# next to $\pi_{\text{ref}}$, and where it sits on the reward-KL frontier.

# %% tags=["nbval-ignore-output"]
display(lab11.temperature_widget(sft_model, sampler=sample_with_temperature))

# %% tags=["nbval-ignore-output"]
display(lab11.beta_widget("hack", optimum_fn=tilted_optimum, beta=1.0))

# %% [markdown]
# ## Going further (optional, not graded)
#
# **k2's bias.** k2 was left out of the plot. The cell below prints its median batch estimate over
# the truth at each temperature. Where is the bias largest, and why does $\ell^2/2$ undershoot when
# $\pi_T$ is sharp but overshoot when it is flat? (Hint: expand k3 for small $\ell$.)

# %%
for T, row in lab11.kl_checks(kl).items():
    print(f"T = {T:4.2f}: k2 / exact = {row['k2_ratio']:.2f}")

# %% [markdown]
# **Samples from an older policy.** PPO-style training samples from $\pi_{\text{old}}$, not from
# the $\pi$ being updated. Weighting k3 by $\pi / \pi_{\text{old}}$ restores an unbiased estimate of
# $\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}})$. Check it exactly on three tokens, then try other
# distributions.

# %%
_pi = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
_ref = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
_old = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
_k3 = kl_estimators(_pi.log(), _ref.log())[2]
print(f"KL(pi || ref)              = {float((_pi * (_pi / _ref).log()).sum()):.5f}")
print(f"E_old[k3]          (plain) = {float((_old * _k3).sum()):.5f}")
print(f"E_old[pi/old * k3] (weighted) = {float((_old * _pi / _old * _k3).sum()):.5f}")

# %% [markdown]
# **The best beta for the true reward.** In "hack", which $\beta$ gives the most true reward, and
# how much proxy reward does $\pi^*$ show there? Compare with the proxy reward at smaller $\beta$:
# the proxy keeps promising more while delivering less.

# %%
_peak = toylm.true_reward_peak(toylm.scenario("hack"), optimum_fn=tilted_optimum)
print(f"best beta {_peak['beta']:.3f}: KL {_peak['kl_nats']:.3f} nats, true reward {_peak['true_reward']:.3f}, "
      f"proxy reward {_peak['reward']:.3f}")
