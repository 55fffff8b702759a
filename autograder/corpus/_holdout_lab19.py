"""lab19 hold-out set: wrong answers nobody listed before, and more correct ones.

Written before the contract tests (see _holdout_lab11.py for how they are used).
"""

from autograder.corpus import Entry, solve

NB = "failure_modes"
S1A, S1B, S1C, S2, S3, S4 = ("task1a_bon_kl", "task1b_best_of_n_stats", "task1c_fit_gao_bon",
                             "task2_kl_penalized_rewards", "task3_clipped_pg_loss", "task4_token_entropy")


def _w(name, sol, what, code):
    return Entry(f"wrong-ho-{name}", NB, what, [solve(sol, code)])


_CLIP_HEAD = '''
def clipped_pg_loss(batch):
    adv = batch.advantages[:, None]
    ratio = torch.exp(batch.logprobs - batch.old_logprobs)
'''

WRONG = [
    # ---- 1a bon_kl
    _w("1a-zero-dim", S1A, "1a an int n gives a 0-dim numpy array, not a float", '''
        def bon_kl(n):
            n = np.asarray(n, dtype=float)
            return np.log(n) - (n - 1) / n
    '''),
    _w("1a-list", S1A, "1a an array of n gives a Python list (and a 2-D array fails)", '''
        import math

        def bon_kl(n):
            if np.ndim(n) == 0:
                return math.log(n) - (n - 1) / n
            return [math.log(x) - (x - 1) / x for x in n]
    '''),
    _w("1a-float32", S1A, "1a computes in float32 (off by 1e-7 at large n)", '''
        def bon_kl(n):
            n = np.asarray(n, dtype=np.float32)
            out = np.log(n) - (n - 1) / n
            return float(out) if out.ndim == 0 else out
    '''),
    _w("1a-ravel", S1A, "1a flattens the array: a 2-D n loses its shape", '''
        def bon_kl(n):
            n = np.asarray(n, dtype=float)
            if n.ndim == 0:
                return float(np.log(n) - (n - 1) / n)
            n = n.ravel()
            return np.log(n) - (n - 1) / n
    '''),
    # ---- 1b best_of_n_stats
    _w("1b-array", S1B, "1b returns one numpy array [proxy, gold] where a tuple of two floats is documented", '''
        def best_of_n_stats(proxy, gold, n):
            proxy = np.asarray(proxy, dtype=float)
            gold = np.asarray(gold, dtype=float)
            M = len(proxy)
            order = np.argsort(proxy)
            p, g = proxy[order], gold[order]
            lo = np.searchsorted(p, p, side="left")
            hi = np.searchsorted(p, p, side="right")
            w = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)
            return np.array([w @ p, w @ g])
    '''),
    _w("1b-sorts-input", S1B, "1b sorts the caller's proxy array in place", '''
        def best_of_n_stats(proxy, gold, n):
            M = len(proxy)
            order = np.argsort(proxy)
            g = np.asarray(gold, dtype=float)[order]
            proxy.sort()                                  # the caller's array changes
            p = np.asarray(proxy, dtype=float)
            lo = np.searchsorted(p, p, side="left")
            hi = np.searchsorted(p, p, side="right")
            w = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)
            return float(w @ p), float(w @ g)
    '''),
    _w("1b-int-power", S1B, "1b integer powers k**n - (k-1)**n over M**n: int64 overflow for large n", '''
        def best_of_n_stats(proxy, gold, n):
            proxy = np.asarray(proxy, dtype=float)
            gold = np.asarray(gold, dtype=float)
            M = len(proxy)
            order = np.argsort(proxy)
            p, g = proxy[order], gold[order]
            lo = np.searchsorted(p, p, side="left")
            hi = np.searchsorted(p, p, side="right")
            w = (hi ** n - lo ** n) / (M ** n) / (hi - lo)
            return float(w @ p), float(w @ g)
    '''),
    _w("1b-tie-tolerance", S1B, "1b ties found with np.isclose(atol=1e-3): nearby but different scores share weight", '''
        def best_of_n_stats(proxy, gold, n):
            proxy = np.asarray(proxy, dtype=float)
            gold = np.asarray(gold, dtype=float)
            M = len(proxy)
            order = np.argsort(proxy)
            p, g = proxy[order], gold[order]
            w = np.empty(M)
            for i in range(M):
                tied = np.isclose(p, p[i], atol=1e-3)
                lo, hi = np.argmax(tied), M - np.argmax(tied[::-1])
                w[i] = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)
            return float(w @ p), float(w @ g)
    '''),
    # ---- 1c fit_gao_bon
    _w("1c-array", S1C, "1c returns lstsq's coefficient array where a tuple of two floats is documented", '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, dtype=float)
            A = np.stack([d, -d * d], axis=1)
            return np.linalg.lstsq(A, np.asarray(gold_gain, dtype=float), rcond=None)[0]
    '''),
    _w("1c-float32", S1C, "1c normal equations in float32 (off by about 1e-6)", '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, dtype=np.float32)
            X = np.stack([d, -d * d], axis=1)
            alpha, beta = np.linalg.solve(X.T @ X, X.T @ np.asarray(gold_gain, dtype=np.float32))
            return float(alpha), float(beta)
    '''),
    _w("1c-ratio", S1C, "1c fits gain / d = alpha - beta d (divides by d: nan at d = 0, other weights)", '''
        def fit_gao_bon(d, gold_gain):
            d = np.asarray(d, dtype=float)
            y = np.asarray(gold_gain, dtype=float) / d
            slope, intercept = np.polyfit(d, y, 1)
            return float(intercept), float(-slope)
    '''),
    # ---- 2 kl_penalized_rewards
    _w("2-in-place", S2, "2 subtracts the penalty from the caller's rewards in place", '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
            rewards -= beta * log_ratio.sum(dim=1)
            return rewards
    '''),
    _w("2-squeeze", S2, "2 squeeze(): a batch of one comes back as a 0-dim tensor", '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
            return (rewards[:, None] - beta * log_ratio.sum(dim=1, keepdim=True)).squeeze()
    '''),
    _w("2-float32", S2, "2 builds the result in a float32 buffer: float64 rewards come back float32", '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            out = torch.zeros(len(rewards))
            for b in range(len(rewards)):
                out[b] = rewards[b] - beta * (logprobs[b][mask[b]] - ref_logprobs[b][mask[b]]).sum()
            return out
    '''),
    _w("2-beta-default", S2, "2 `beta or 0.05`: beta = 0 silently becomes 0.05", '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            beta = beta or 0.05
            log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
            return rewards - beta * log_ratio.sum(dim=1)
    '''),
    _w("2-abs", S2, "2 penalises |log pi - log pi_ref| (a policy below the reference is penalised too)", '''
        def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
            log_ratio = torch.where(mask, (logprobs - ref_logprobs).abs(), torch.zeros_like(logprobs))
            return rewards - beta * log_ratio.sum(dim=1)
    '''),
    # ---- 3 clipped_pg_loss
    _w("3-eps-constant", S3, "3 clips at 0.8 and 1.2 whatever eps_low and eps_high say", _CLIP_HEAD + '''
            surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
            m = batch.mask.to(surrogate.dtype)
            return -(surrogate * m).sum() / m.sum()
    '''),
    _w("3-none-default", S3, "3 a None epsilon falls back to 0.2 instead of removing the bound", _CLIP_HEAD + '''
            lo = 1 - (batch.eps_low or 0.2)
            hi = 1 + (batch.eps_high or 0.2)
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            m = batch.mask.to(surrogate.dtype)
            return -(surrogate * m).sum() / m.sum()
    '''),
    _w("3-detached-ratio", S3, "3 detaches the ratio: no gradient", '''
        def clipped_pg_loss(batch):
            adv = batch.advantages[:, None]
            ratio = torch.exp(batch.logprobs - batch.old_logprobs).detach()
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            m = batch.mask.to(surrogate.dtype)
            return -(surrogate * m).sum() / m.sum() + 0 * batch.logprobs.sum()
    '''),
    _w("3-adv-row", S3, "3 broadcasts the advantages along the wrong axis (advantages[None, :]): an error "
       "when B != R, silently wrong when B = R", _CLIP_HEAD + '''
            adv = batch.advantages[None, :]
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            m = batch.mask.to(surrogate.dtype)
            return -(surrogate * m).sum() / m.sum()
    '''),
    _w("3-float32", S3, "3 a float32 mask weight and accumulator: a float64 batch gives a float32 loss", _CLIP_HEAD + '''
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv).float()
            m = batch.mask.float()
            return -(surrogate * m).sum() / m.sum()
    '''),
    _w("3-mask-ignored-ratio", S3, "3 clips the padding's ratio but counts padding in the numerator (garbage at "
       "padding leaks)", _CLIP_HEAD + '''
            lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
            hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
            surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            return -surrogate.sum() / batch.mask.sum()
    '''),
    # ---- 4 token_entropy
    _w("4-float32", S4, "4 casts to float32: float64 logits give a float32 entropy", '''
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits.float(), dim=-1)
            return -(logp.exp() * logp).sum(dim=-1)[mask].mean()
    '''),
    _w("4-item", S4, "4 returns a Python float (.item()) where a scalar tensor is documented", '''
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits, dim=-1)
            return (-(logp.exp() * logp).sum(dim=-1)[mask].mean()).item()
    '''),
    _w("4-no-grad", S4, "4 computed under torch.no_grad(): the entropy carries no gradient", '''
        @torch.no_grad()
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits, dim=-1)
            return -(logp.exp() * logp).sum(dim=-1)[mask].mean()
    '''),
    _w("4-shifted", S4, "4 shifts the mask by one position (the logits that scored the token, not chose it)", '''
        def token_entropy(logits, mask):
            logp = torch.log_softmax(logits[:, 1:], dim=-1)
            return -(logp.exp() * logp).sum(dim=-1)[mask[:, :-1]].mean()
    '''),
]

RIGHT = [
    Entry("right-ho-a", NB, "hold-out: correct in other ways (np.vectorize-free formula, cumulative ranks, "
          "pinv, einsum, a clamp of the log-ratio, logsumexp entropy)", [
        solve(S1A, '''
            def bon_kl(n):
                out = np.log(n) - 1 + 1 / np.asarray(n, dtype=np.float64)
                return out if np.ndim(out) else float(out)
        '''),
        solve(S1B, '''
            def best_of_n_stats(proxy, gold, n):
                proxy = np.asarray(proxy, dtype=float)
                gold = np.asarray(gold, dtype=float)
                M = proxy.size
                values, inverse, counts = np.unique(proxy, return_inverse=True, return_counts=True)
                hi = np.cumsum(counts)
                lo = hi - counts
                block_w = (hi / M) ** n - (lo / M) ** n
                gold_mean = np.bincount(inverse, weights=gold) / counts
                return float(block_w @ values), float(block_w @ gold_mean)
        '''),
        solve(S1C, '''
            def fit_gao_bon(d, gold_gain):
                d = np.asarray(d, dtype=float)
                X = np.column_stack((d, -(d ** 2)))
                alpha, beta = np.linalg.pinv(X) @ np.asarray(gold_gain, dtype=float)
                return float(alpha), float(beta)
        '''),
        solve(S2, '''
            def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
                log_ratio = (logprobs - ref_logprobs).masked_fill(~mask, 0)
                return rewards - beta * torch.einsum("br->b", log_ratio)
        '''),
        solve(S3, '''
            def clipped_pg_loss(batch):
                log_ratio = batch.logprobs - batch.old_logprobs
                ratio = log_ratio.exp()
                lo = None if batch.eps_low is None else 1 - batch.eps_low
                hi = None if batch.eps_high is None else 1 + batch.eps_high
                adv = batch.advantages.unsqueeze(-1)
                clipped = ratio if lo is None and hi is None else torch.clamp(ratio, min=lo, max=hi)
                obj = torch.min(ratio * adv, clipped * adv)
                obj = torch.where(batch.mask, obj, torch.zeros_like(obj))
                return -obj.sum() / batch.mask.sum()
        '''),
        solve(S4, '''
            def token_entropy(logits, mask):
                logz = torch.logsumexp(logits, dim=-1, keepdim=True)
                p = torch.exp(logits - logz)
                h = logz.squeeze(-1) - (p * logits).sum(-1)
                return h.masked_select(mask).mean()
        '''),
    ]),
    Entry("right-ho-b", NB, "hold-out: correct in yet other ways (loops over ranks, a where-based masked mean)", [
        solve(S1B, '''
            def best_of_n_stats(proxy, gold, n):
                proxy = np.asarray(proxy, dtype=float)
                gold = np.asarray(gold, dtype=float)
                M = len(proxy)
                exp_p = exp_g = 0.0
                for i in range(M):
                    lo = int(np.sum(proxy < proxy[i]))
                    hi = int(np.sum(proxy <= proxy[i]))
                    w = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)
                    exp_p += w * proxy[i]
                    exp_g += w * gold[i]
                return float(exp_p), float(exp_g)
        '''),
        solve(S4, '''
            def token_entropy(logits, mask):
                logp = logits.log_softmax(-1)
                h = -(logp.exp() * logp).sum(-1)
                h = torch.where(mask, h, torch.zeros_like(h))
                return h.sum() / mask.sum()
        '''),
    ]),
]

HOLDOUT = WRONG + RIGHT
