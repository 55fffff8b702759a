# A student who scores each response token with the logits of its own column (no shift).
# The shapes, dtype and inputs are right; the hand example and the gradient's columns catch it (2 of
# 1a's 3 points). Task 1b is correct. Expected: 3 of 18 points (tasks 2-5 are left as stubs).

# %% grade_id=task1a_response_logprobs
def response_logprobs(logits, tokens, prompt_len):
    logp = torch.log_softmax(logits[:, prompt_len:], dim=-1)
    return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)

# %% grade_id=task1b_sequence_logprob
def sequence_logprob(token_logprobs, mask):
    return torch.where(mask, token_logprobs, 0.0).sum(-1)
