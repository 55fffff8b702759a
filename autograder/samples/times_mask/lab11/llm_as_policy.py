# A student who masks by multiplying: fine until a padding position holds -inf (0 * -inf = nan).
# Task 1b loses its extreme-input and gradient cells (1 of its 2 points); task 1a is correct.
# Expected: 4 of 18 points (tasks 2-5 are left as stubs).

# %% grade_id=task1a_response_logprobs
def response_logprobs(logits, tokens, prompt_len):
    logp = torch.log_softmax(logits, dim=-1)[:, prompt_len - 1 : -1]
    return torch.gather(logp, 2, tokens[:, prompt_len:, None])[..., 0]

# %% grade_id=task1b_sequence_logprob
def sequence_logprob(token_logprobs, mask):
    return (token_logprobs * mask).sum(dim=1)
