"""A second hold-out set, written AFTER the contract tests and measured once, without
changing a test for it: a less optimistic estimate than the first hold-out set (_holdout_<a>.py),
which was written from the same list of kinds of mistake as the tests. Everyday slips of other kinds
(a wrong axis, a wrong normaliser, a missing special case). catch_rates measures these with the
hold-out set (`SECOND` by assignment); nothing here is graded by nbgrader.
"""

from autograder.corpus import Entry, solve


def _w(nb, name, sol, what, code):
    return Entry(f"wrong-ho2-{name}", nb, what, [solve(sol, code)])


L11, L19, L21, H4 = "llm_as_policy", "failure_modes", "tasks", "llm_rl"

SECOND = {
    "lab11": [
        _w(L11, "1a-time-softmax", "task1a_response_logprobs", "1a log_softmax over the time axis", '''
            def response_logprobs(logits, tokens, prompt_len):
                logp = torch.log_softmax(logits, dim=1)[:, prompt_len - 1:-1]
                return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
        '''),
        _w(L11, "1b-inverted-mask", "task1b_sequence_logprob", "1b sums the padding instead of the real tokens", '''
            def sequence_logprob(token_logprobs, mask):
                return token_logprobs.masked_fill(mask, 0.0).sum(dim=-1)
        '''),
        _w(L11, "2-nonpositive-greedy", "task2_sample_with_temperature", "2 any T <= 0 is greedy (no error for a "
           "negative T)", '''
            def sample_with_temperature(logits, temperature, generator=None):
                if temperature <= 0:
                    return logits.argmax(dim=-1)
                return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator).squeeze(-1)
        '''),
        _w(L11, "2-categorical", "task2_sample_with_temperature", "2 torch.distributions.Categorical(...).sample() "
           "(the generator is not used)", '''
            def sample_with_temperature(logits, temperature, generator=None):
                if temperature < 0:
                    raise ValueError("negative temperature")
                if temperature == 0:
                    return logits.argmax(dim=-1)
                return torch.distributions.Categorical(logits=logits / temperature).sample()
        '''),
        _w(L11, "3-abs-k1", "task3_kl_estimators", "3 k1 as |l| ('a KL is never negative')", '''
            def kl_estimators(logp, logp_ref):
                l = logp - logp_ref
                return l.abs(), 0.5 * l ** 2, torch.exp(-l) - 1 + l
        '''),
        _w(L11, "4-mean-shift", "task4_tilted_optimum", "4 shifts log pi_ref + r / beta by its mean, not its max",
           '''
            def tilted_optimum(ref_probs, rewards, beta):
                with np.errstate(divide="ignore", invalid="ignore"):
                    z = np.log(np.asarray(ref_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
                    w = np.exp(z - z[np.isfinite(z)].mean())
                return w / w.sum()

            def kl_objective(probs, ref_probs, rewards, beta):
                probs = np.asarray(probs, dtype=float)
                s = probs > 0
                return float(probs @ np.asarray(rewards, dtype=float)
                             - beta * np.sum(probs[s] * np.log(probs[s] / np.asarray(ref_probs, dtype=float)[s])))
        '''),
        _w(L11, "5-direct-second", "task5_token_level_optimum", "5 pi*(j | i) by normalising pi_ref e^(r / beta) "
           "directly (values in log space)", '''
            def token_level_optimum(first_probs, second_probs, rewards, beta):
                with np.errstate(divide="ignore"):
                    z = np.log(np.asarray(second_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
                values = beta * np.logaddexp.reduce(z, axis=1)
                w = np.asarray(second_probs, dtype=float) * np.exp(np.asarray(rewards, dtype=float) / beta)
                return tilted_optimum(first_probs, values, beta), w / w.sum(axis=1, keepdims=True), values
        '''),
    ],
    "lab19": [
        _w(L19, "1a-flipped-fraction", "task1a_bon_kl", "1a log n - n / (n - 1)", '''
            def bon_kl(n):
                n = np.asarray(n, dtype=float)
                with np.errstate(divide="ignore"):
                    out = np.log(n) - n / (n - 1)
                return float(out) if out.ndim == 0 else out
        '''),
        _w(L19, "1b-gold-unshared", "task1b_best_of_n_stats", "1b shares tied weight for the proxy but not the gold",
           '''
            def best_of_n_stats(proxy, gold, n):
                proxy = np.asarray(proxy, dtype=float)
                gold = np.asarray(gold, dtype=float)
                M = len(proxy)
                order = np.argsort(proxy)
                p, g = proxy[order], gold[order]
                lo = np.searchsorted(p, p, side="left")
                hi = np.searchsorted(p, p, side="right")
                w = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)
                k = np.arange(1, M + 1)
                w_rank = (k / M) ** n - ((k - 1) / M) ** n
                return float(w @ p), float(w_rank @ g)
        '''),
        _w(L19, "1c-two-points", "task1c_fit_gao_bon", "1c solves the 2x2 system of the first two points", '''
            def fit_gao_bon(d, gold_gain):
                d = np.asarray(d, dtype=float)
                A = np.stack([d[:2], -d[:2] ** 2], axis=1)
                alpha, beta = np.linalg.solve(A, np.asarray(gold_gain, dtype=float)[:2])
                return float(alpha), float(beta)
        '''),
        _w(L19, "2-sum-dim0", "task2_kl_penalized_rewards", "2 sums the log-ratio over the batch axis", '''
            def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
                log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
                return rewards - beta * log_ratio.sum(dim=0)[: len(rewards)]
        '''),
        _w(L19, "3-none-zero", "task3_clipped_pg_loss", "3 a None epsilon read as 0 (clips at the ratio 1)", '''
            def clipped_pg_loss(batch):
                adv = batch.advantages[:, None]
                ratio = torch.exp(batch.logprobs - batch.old_logprobs)
                lo, hi = 1 - (batch.eps_low or 0.0), 1 + (batch.eps_high or 0.0)
                surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
                m = batch.mask.to(surrogate.dtype)
                return -(surrogate * m).sum() / m.sum()
        '''),
        _w(L19, "3-per-row-count", "task3_clipped_pg_loss", "3 divides by the number of responses, not of tokens",
           '''
            def clipped_pg_loss(batch):
                adv = batch.advantages[:, None]
                ratio = torch.exp(batch.logprobs - batch.old_logprobs)
                lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
                hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
                surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
                return -torch.where(batch.mask, surrogate, torch.zeros_like(surrogate)).sum() / batch.mask.shape[0]
        '''),
        _w(L19, "4-bits", "task4_token_entropy", "4 entropy in bits (log2)", '''
            def token_entropy(logits, mask):
                logp = torch.log_softmax(logits, dim=-1)
                return -(logp.exp() * logp / np.log(2)).sum(dim=-1)[mask].mean()
        '''),
    ],
    "lab21": [
        _w(L21, "1-unmasked", "task1_reverse_kl_rewards", "1 leaves the padding's reward as it is", '''
            def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
                return (teacher_logprobs - student_logprobs).detach()
        '''),
        _w(L21, "2-probabilities", "task2_opd_pg_loss", "2 weights the probability, not the log-probability", '''
            def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
                r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
                p = torch.where(mask, student_logprobs.exp(), torch.zeros_like(student_logprobs))
                return -(r * p).sum() / mask.sum().clamp(min=1)
        '''),
        _w(L21, "3-padding-in-sum", "task3_full_vocab_reverse_kl", "3 sums the KL over every position, divides by "
           "the real ones", '''
            def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
                lp = torch.log_softmax(student_logits, -1)
                lq = torch.log_softmax(teacher_logits, -1)
                return (lp.exp() * (lp - lq)).sum() / mask.sum().clamp(min=1)
        '''),
        _w(L21, "4-k-minus-one", "task4_pass_at_k", "4 the product with k - 1 instead of k", '''
            def pass_at_k(n, c, k):
                if n - c < k:
                    return 1.0
                prod = 1.0
                for i in range(n - c + 1, n + 1):
                    prod *= 1.0 - (k - 1) / i
                return 1.0 - prod
        '''),
        _w(L21, "5-no-baseline", "task5_maxrl_advantages", "5 r / p_hat without subtracting the baseline", '''
            def maxrl_advantages(rewards):
                p = rewards.mean(dim=1, keepdim=True)
                return torch.where(p > 0, rewards / torch.where(p > 0, p, torch.ones_like(p)), torch.zeros_like(rewards))
        '''),
    ],
    "hw4": [
        _w(H4, "1-next-column", "task1_per_token_logprobs", "1 scores token t + 1 with logits column t + 1", '''
            def compute_per_token_logprobs(logits, input_ids):
                logp = torch.log_softmax(logits.float(), dim=-1)[:, 1:]
                return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        '''),
        _w(H4, "2-unshifted-mask", "task2_completion_mask", "2 reads attention_mask[:, :-1] (the token that scores, "
           "not the one scored)", '''
            def build_completion_mask(attention_mask, prompt_len):
                T = attention_mask.shape[1]
                return attention_mask[:, :-1].bool() & (torch.arange(1, T) >= prompt_len)
        '''),
        _w(H4, "3-all-positions", "task3_approx_kl", "3 averages over every position, padding as zeros", '''
            def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
                delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
                k3 = torch.exp(delta) - delta - 1.0
                return torch.where(mask, k3, torch.zeros_like(k3)).mean()
        '''),
        _w(H4, "4-always-shuffle", "task4_iter_minibatches", "4 shuffles without a generator too", '''
            def iter_minibatches(batch, minibatch_size, generator=None):
                sizes = {k: v.shape[0] for k, v in batch.items()}
                if len(set(sizes.values())) != 1:
                    raise ValueError(f"row counts differ: {sizes}")
                n = next(iter(sizes.values()))
                order = torch.randperm(n, generator=generator)
                for start in range(0, n, minibatch_size):
                    rows = order[start:start + minibatch_size]
                    yield {k: v[rows] for k, v in batch.items()}
        '''),
        _w(H4, "5-range", "task5_group_advantages", "5 divides by the group's range (max - min), not its std", '''
            def compute_group_advantages(rewards, group_size, eps=1e-6):
                if rewards.shape[0] % group_size:
                    raise ValueError("B must be a multiple of group_size")
                r = rewards.double().view(-1, group_size)
                spread = r.max(1, keepdim=True).values - r.min(1, keepdim=True).values
                return ((r - r.mean(1, keepdim=True)) / (spread + eps)).reshape(-1).float()
        '''),
        _w(H4, "6-max-abs", "task6_normalize_advantages", "6 divides by the largest |advantage|", '''
            def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
                adv = advantages.clone()
                if normalize:
                    adv = (adv - adv.mean()) / (adv.abs().max() + eps)
                return adv if clip is None else adv.clamp(-clip, clip)
        '''),
        _w(H4, "7-sum-rows", "task7_reinforce_loss", "7 sums over the rows instead of averaging", '''
            def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
                n = mask.sum(dim=1).clamp(min=1)
                seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n
                return -(advantages * seq).sum() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
        '''),
        _w(H4, "8-clip-advantage", "task8_grpo_loss", "8 clips the advantages instead of the ratio", '''
            def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
                zeros = torch.zeros_like(logprobs)
                ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, zeros))
                adv = advantages[:, None]
                surrogate = torch.minimum(ratio * adv, ratio * adv.clamp(-1 - clip_eps, 1 + clip_eps))
                per_seq = torch.where(mask, surrogate, zeros).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
                return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
        '''),
    ],
}
