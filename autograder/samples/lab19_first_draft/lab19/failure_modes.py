# A first draft of lab19 with the mistakes that once passed every visible test: the KL sum and the
# entropy ignore the mask, the Gao fit has an intercept, the clipped loss averages per response, and
# best-of-n breaks ties by the sort order. Only Task 1a is right. The visible tests now stop each of
# these with a message that names the fix (autograder/catch_rates.py measures it for the corpus).
# Each mistake costs the cells of the concern it gets wrong (ties 1 of 1b's 3 points, the values of
# 1c, 2 and 4, the values and gradient of 3, and 2's padding cell); the rest of each task stands.
# Expected: 6.5 of 14 points.

# %% grade_id=task1a_bon_kl
def bon_kl(n):
    n = np.asarray(n, dtype=float)
    out = np.log(n) - (n - 1) / n
    return float(out) if out.ndim == 0 else out

# %% grade_id=task1b_best_of_n_stats
def best_of_n_stats(proxy, gold, n):
    proxy, gold = np.asarray(proxy, dtype=float), np.asarray(gold, dtype=float)
    order = np.argsort(proxy)
    k = np.arange(1, len(proxy) + 1) / len(proxy)
    w = k ** n - (k - 1 / len(proxy)) ** n
    return float(w @ proxy[order]), float(w @ gold[order])

# %% grade_id=task1c_fit_gao_bon
def fit_gao_bon(d, gold_gain):
    c = np.polyfit(np.asarray(d, dtype=float), np.asarray(gold_gain, dtype=float), 2)
    return float(c[1]), float(-c[0])

# %% grade_id=task2_kl_penalized_rewards
def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
    return rewards - beta * (logprobs - ref_logprobs).sum(dim=1)

# %% grade_id=task3_clipped_pg_loss
def clipped_pg_loss(batch):
    adv = batch.advantages[:, None]
    ratio = torch.exp(batch.logprobs - batch.old_logprobs)
    lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
    hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
    s = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
    m = batch.mask.float()
    return -((s * m).sum(1) / m.sum(1)).mean()

# %% grade_id=task4_token_entropy
def token_entropy(logits, mask):
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()
