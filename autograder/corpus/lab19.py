"""lab19 (failure_modes): realistic answers, two wrong ones per task (the handout's mistakes).

Each wrong answer loses the test cells of its task that grade the concern it gets wrong (a task's
tests are split by concern; `tests(task, *concerns)` names them).
"""

from autograder.corpus import Entry, solve, standard_entries, tests

NB = "failure_modes"
S1A, S1B, S1C, S2, S3, S4 = ("task1a_bon_kl", "task1b_best_of_n_stats", "task1c_fit_gao_bon",
                             "task2_kl_penalized_rewards", "task3_clipped_pg_loss", "task4_token_entropy")

REWRITTEN = [
    solve(S1A, '''
        def bon_kl(n):
            n = np.asarray(n, dtype=np.float64)
            kl = np.log(n) - 1.0 + 1.0 / n
            return kl if kl.ndim else float(kl)
    '''),
    solve(S1B, '''
        def best_of_n_stats(proxy, gold, n):
            # one block per distinct proxy score, lowest first; a block shares its weight evenly
            M = len(proxy)
            ep = eg = 0.0
            below = 0
            for score in sorted(set(float(p) for p in proxy)):
                block = [g for p, g in zip(proxy, gold) if p == score]
                w = ((below + len(block)) / M) ** n - (below / M) ** n
                ep += w * score
                eg += w * sum(block) / len(block)
                below += len(block)
            return float(ep), float(eg)
    '''),
    solve(S1C, '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, float)
            y = np.asarray(gold_gain, float)
            X = np.column_stack([d, -d ** 2])
            alpha, beta = np.linalg.solve(X.T @ X, X.T @ y)      # normal equations
            return float(alpha), float(beta)
    '''),
    solve(S2, '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            diff = (logprobs - ref_logprobs).masked_fill(~mask, 0.0)
            return rewards - beta * diff.sum(-1)
    '''),
    solve(S3, '''
        def clipped_pg_loss(batch):
            ratio = (batch.logprobs - batch.old_logprobs).exp()
            adv = batch.advantages.unsqueeze(1).expand_as(ratio)
            clipped = ratio
            if batch.eps_high is not None:
                clipped = torch.clamp(clipped, max=1 + batch.eps_high)
            if batch.eps_low is not None:
                clipped = torch.clamp(clipped, min=1 - batch.eps_low)
            objective = torch.min(ratio * adv, clipped * adv)
            return -objective[batch.mask].mean()
    '''),
    solve(S4, '''
        def token_entropy(logits, mask):
            return torch.distributions.Categorical(logits=logits).entropy()[mask].mean()
    '''),
]

WRONG_A = [
    solve(S1A, '''
        def bon_kl(n):
            return np.log(n) - (n - 1)                      # forgot the / n
    '''),
    solve(S1B, '''
        def best_of_n_stats(proxy, gold, n):
            M = len(proxy)
            k = np.arange(1, M + 1)
            w = (k / M) ** n - ((k - 1) / M) ** n
            return float(w @ np.sort(proxy)), float(w @ np.sort(gold))   # sorts gold on its own
    '''),
    solve(S2, '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            return rewards - beta * ((logprobs - ref_logprobs) * mask).sum(dim=1)   # inf * 0 = nan
    '''),
    solve(S4, '''
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits, dim=-1)
            return -(logp.exp() * logp).sum(-1).mean()     # every position, not only the response
    '''),
]
WRONG_B = [
    solve(S1A, '''
        def bon_kl(n):
            import math
            return math.log(n) - (n - 1) / n                # scalars only
    '''),
    solve(S1B, '''
        def best_of_n_stats(proxy, gold, n):
            proxy, gold = np.asarray(proxy, float), np.asarray(gold, float)
            order = np.argsort(-proxy)                      # highest first: weights on the wrong end
            M = len(proxy)
            k = np.arange(1, M + 1)
            w = (k / M) ** n - ((k - 1) / M) ** n
            return float(w @ proxy[order]), float(w @ gold[order])
    '''),
    solve(S2, '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
            return rewards + beta * log_ratio.sum(dim=1)    # a bonus instead of a penalty
    '''),
    solve(S4, '''
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits, dim=-1)
            h = -(logp.exp() * logp).sum(-1)
            return ((h * mask).sum(1) / mask.sum(1)).mean()  # mean of per-sequence means
    '''),
]
WRONG_C = [
    solve(S1C, '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, float)
            A = np.stack([d, d * d], axis=1)                # beta with the wrong sign
            (alpha, beta), *_ = np.linalg.lstsq(A, gold_gain, rcond=None)
            return float(alpha), float(beta)
    '''),
    solve(S3, '''
        def clipped_pg_loss(batch):
            adv = batch.advantages[:, None]
            ratio = torch.exp(batch.logprobs - batch.old_logprobs)
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.maximum(ratio * adv, ratio.clamp(lo, hi) * adv)   # max, not min
            m = batch.mask.float()
            return -(surrogate * m).sum() / m.sum()
    '''),
]
WRONG_D = [
    solve(S1C, '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, float)
            A = np.stack([np.ones_like(d), d, -d * d], axis=1)   # an intercept the curve does not have
            (_, alpha, beta), *_ = np.linalg.lstsq(A, gold_gain, rcond=None)
            return float(alpha), float(beta)
    '''),
    solve(S3, '''
        def clipped_pg_loss(batch):
            adv = batch.advantages[:, None]
            ratio = torch.exp(batch.logprobs - batch.old_logprobs)
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            m = batch.mask.float()
            return -((surrogate * m).sum(1) / m.sum(1)).mean()     # sequence mean, not token mean
    '''),
]

# the traps the first corpus lacked
WRONG_E = [
    solve(S1C, '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, dtype=float)
            A = np.stack([d, -d * d], axis=1)
            coef, *_ = np.linalg.lstsq(A, np.asarray(gold_gain, dtype=float), rcond=None)
            return coef                                            # a numpy array, not a tuple of two floats
    '''),
    solve(S1B, '''
        def best_of_n_stats(proxy, gold, n):
            proxy, gold = np.asarray(proxy, float), np.asarray(gold, float)
            M = len(proxy)
            order = np.argsort(proxy)                       # ties: whatever order the sort leaves
            k = np.arange(1, M + 1)
            w = (k / M) ** n - ((k - 1) / M) ** n
            return float(w @ proxy[order]), float(w @ gold[order])
    '''),
    solve(S3, '''
        def clipped_pg_loss(batch):
            adv = batch.advantages[:, None]
            ratio = batch.logprobs.exp() / batch.old_logprobs.exp()     # 0 / 0 for unlikely tokens
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            return -surrogate[batch.mask].mean()
    '''),
    solve(S4, '''
        def token_entropy(logits, mask):
            p = torch.softmax(logits, dim=-1)
            return -(p * p.log()).sum(-1)[mask].mean()      # 0 * log 0 = nan for peaked logits
    '''),
]
WRONG_F = [
    solve(S1C, '''
        def fit_gao_bon(d, gold_gain):
            c2, c1, _ = np.polyfit(d, gold_gain, 2)         # a quadratic with an intercept
            return float(c1), float(-c2)
    '''),
    solve(S2, '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
            return rewards - beta * log_ratio.sum(1) / mask.sum(1).clamp(min=1)   # a mean per token, not the sum
    '''),
    solve(S4, '''
        def token_entropy(logits, mask):
            p = torch.softmax(logits, dim=-1)
            return -(p * logits).sum(-1)[mask].mean()       # raw logits instead of log-probs
    '''),
]

ENTRIES = standard_entries(NB) + [
    Entry("rewritten", NB, "every task correct, written differently (loops, normal equations, masked_fill, "
          "clamp, Categorical)", REWRITTEN),
    Entry("wrong-a", NB, "1a forgot /n, 1b sorts gold on its own, 2 multiplies by the mask, 4 ignores the mask",
          WRONG_A, lose=tests(S1A, "values") + tests(S1B, "values", "ties", "edge") + tests(S2, "edge") + tests(S4, "values")),
    Entry("wrong-b", NB, "1a scalars only, 1b highest first, 2 KL as a bonus, 4 mean of sequence means",
          WRONG_B, lose=tests(S1A, "values", "contract") + tests(S1B, "values", "ties", "edge") + tests(S2, "values", "edge") + tests(S4, "values")),
    Entry("wrong-c", NB, "1c beta with the wrong sign, 3 max instead of min", WRONG_C, lose=tests(S1C, "values") + tests(S3, "values", "grad", "bounds")),
    Entry("wrong-d", NB, "1c fits an intercept, 3 sequence-level mean", WRONG_D, lose=tests(S1C, "values") + tests(S3, "values", "grad")),
    Entry("wrong-e", NB, "1b ties broken by the sort order, 1c returns the numpy array of coefficients, 3 ratio as exp / exp (0 / 0), 4 p log p with p = 0",
          WRONG_E, lose=tests(S1B, "ties") + tests(S1C, "contract") + tests(S3, "values") + tests(S4, "edge")),
    Entry("wrong-f", NB, "1c np.polyfit (an intercept), 2 a per-token mean instead of the sum, 4 raw logits as log-probs",
          WRONG_F, lose=tests(S1C, "values") + tests(S2, "values", "edge") + tests(S4, "values", "edge")),
]
