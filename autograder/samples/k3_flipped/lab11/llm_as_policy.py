# A student who writes k3 as e^l - 1 - l (the ratio pi / pi_ref instead of pi_ref / pi: still never
# negative, but biased) and samples with softmax(logits / T) even at T = 0 (nan probabilities).
# Tasks 1a, 1b, 4 and 5 are correct. The flipped k3 costs task 3's values, extreme-input and gradient
# cells (2.5 of its 3 points); T = 0 costs task 2's extreme-input cell (0.5). Expected: 15 of 18 points.

# %% grade_id=task1a_response_logprobs
def response_logprobs(logits, tokens, prompt_len):
    logp = torch.log_softmax(logits[:, prompt_len - 1:-1], dim=-1)
    return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)

# %% grade_id=task1b_sequence_logprob
def sequence_logprob(token_logprobs, mask):
    return torch.where(mask, token_logprobs, 0.0).sum(-1)

# %% grade_id=task2_sample_with_temperature
def sample_with_temperature(logits, temperature, generator=None):
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

# %% grade_id=task3_kl_estimators
def kl_estimators(logp, logp_ref):
    l = logp - logp_ref
    return l, l ** 2 / 2, torch.exp(l) - 1 - l

# %% grade_id=task4_tilted_optimum
def tilted_optimum(ref_probs, rewards, beta):
    with np.errstate(divide="ignore"):
        z = np.log(ref_probs) + rewards / beta
    w = np.exp(z - z.max())
    return w / w.sum()


def kl_objective(probs, ref_probs, rewards, beta):
    m = probs > 0
    return float(probs @ rewards - beta * np.sum(probs[m] * np.log(probs[m] / ref_probs[m])))

# %% grade_id=task5_token_level_optimum
def token_level_optimum(first_probs, second_probs, rewards, beta):
    with np.errstate(divide="ignore"):
        z = np.log(second_probs) + rewards / beta
    values = beta * np.logaddexp.reduce(z, axis=1)
    return tilted_optimum(first_probs, values, beta), np.exp(z - values[:, None] / beta), values
