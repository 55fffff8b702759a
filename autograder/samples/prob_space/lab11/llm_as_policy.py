# A student who builds pi* as pi_ref * exp(r / beta) / Z directly, in probability space, and the soft
# values as beta * log(sum pi_ref * exp(r / beta)). Right at beta = 1; exp(2 / 0.001) overflows to
# inf and inf / inf is nan, which the small-beta tests catch: tasks 4 and 5 lose their extreme-input
# cells (1.5 and 1 point). Tasks 1a-3 are correct. Expected: 15.5 of 18 points.

# %% grade_id=task1a_response_logprobs
def response_logprobs(logits, tokens, prompt_len):
    logp = torch.log_softmax(logits[:, prompt_len - 1:-1], dim=-1)
    return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)

# %% grade_id=task1b_sequence_logprob
def sequence_logprob(token_logprobs, mask):
    return torch.where(mask, token_logprobs, 0.0).sum(-1)

# %% grade_id=task2_sample_with_temperature
def sample_with_temperature(logits, temperature, generator=None):
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]

# %% grade_id=task3_kl_estimators
def kl_estimators(logp, logp_ref):
    l = logp - logp_ref
    return l, l * l / 2, torch.exp(-l) - 1 + l

# %% grade_id=task4_tilted_optimum
def tilted_optimum(ref_probs, rewards, beta):
    weights = ref_probs * np.exp(rewards / beta)
    return weights / weights.sum()


def kl_objective(probs, ref_probs, rewards, beta):
    kl = sum(p * np.log(p / q) for p, q in zip(probs, ref_probs) if p > 0)
    return float(np.dot(probs, rewards) - beta * kl)

# %% grade_id=task5_token_level_optimum
def token_level_optimum(first_probs, second_probs, rewards, beta):
    tilted = second_probs * np.exp(rewards / beta)
    values = beta * np.log(tilted.sum(axis=1))
    pi_second = tilted / tilted.sum(axis=1, keepdims=True)
    return tilted_optimum(first_probs, values, beta), pi_second, values
