"""lab11 hold-out set: wrong answers nobody listed before, and more correct ones.

Written before the contract tests, from the kinds of mistake they were to catch (wrong
structure, dtype, no gradient, the documented RNG use, a sampler that never draws the tail of a
large vocabulary, a batch of one squeezed away, a re-seeded global RNG, inputs modified in place,
extreme but valid inputs) and other plausible slips. autograder/corpus/catch_rates.py measures them
(`--holdout`); they are not graded with nbgrader in make test (each would cost a kernel run).
Each `wrong-*` entry replaces one solution cell; each `right-*` entry must pass every test cell.
"""

from autograder.corpus import Entry, solve

NB = "llm_as_policy"
S1A, S1B, S2, S3, S4, S5 = ("task1a_response_logprobs", "task1b_sequence_logprob",
                            "task2_sample_with_temperature", "task3_kl_estimators",
                            "task4_tilted_optimum", "task5_token_level_optimum")

_KL_OBJ = '''

def kl_objective(probs, ref_probs, rewards, beta):
    probs = np.asarray(probs, dtype=float)
    ref_probs = np.asarray(ref_probs, dtype=float)
    s = probs > 0
    return float(probs @ np.asarray(rewards, dtype=float) - beta * np.sum(probs[s] * np.log(probs[s] / ref_probs[s])))
'''


def _w(name, sol, what, code):
    return Entry(f"wrong-ho-{name}", NB, what, [solve(sol, code)])


WRONG = [
    # ---- 1a response_logprobs
    _w("1a-squeeze", S1A, "1a squeeze() drops a batch of one (and a single response token)", '''
        def response_logprobs(logits, tokens, prompt_len):
            logp = torch.log_softmax(logits[:, prompt_len - 1:-1], dim=-1)
            return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze()
    '''),
    _w("1a-float32", S1A, "1a casts to float32: float64 logits come back float32", '''
        def response_logprobs(logits, tokens, prompt_len):
            logp = torch.log_softmax(logits[:, prompt_len - 1:-1].float(), dim=-1)
            return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    '''),
    _w("1a-no-grad", S1A, "1a computed under torch.no_grad(): no gradient reaches the logits", '''
        def response_logprobs(logits, tokens, prompt_len):
            with torch.no_grad():
                logp = torch.log_softmax(logits[:, prompt_len - 1:-1], dim=-1)
                return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    '''),
    _w("1a-in-place", S1A, "1a normalises the caller's logits in place", '''
        def response_logprobs(logits, tokens, prompt_len):
            logits -= torch.logsumexp(logits, dim=-1, keepdim=True)       # the caller's tensor changes
            return logits[:, prompt_len - 1:-1].gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    '''),
    _w("1a-loop-list", S1A, "1a a loop that builds the result with torch.tensor (no gradient, float32)", '''
        def response_logprobs(logits, tokens, prompt_len):
            B, T = tokens.shape
            out = [[torch.log_softmax(logits[b, t - 1], -1)[tokens[b, t]].item() for t in range(prompt_len, T)]
                   for b in range(B)]
            return torch.tensor(out)
    '''),
    # ---- 1b sequence_logprob
    _w("1b-in-place", S1B, "1b zeroes the padding of the caller's tensor in place", '''
        def sequence_logprob(token_logprobs, mask):
            token_logprobs[~mask] = 0.0
            return token_logprobs.sum(dim=-1)
    '''),
    _w("1b-squeeze", S1B, "1b squeeze(): a batch of one comes back as a 0-dim tensor", '''
        def sequence_logprob(token_logprobs, mask):
            return torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs)).sum(dim=-1, keepdim=True).squeeze()
    '''),
    _w("1b-list-tensor", S1B, "1b a Python loop wrapped in torch.tensor: float32 and no gradient", '''
        def sequence_logprob(token_logprobs, mask):
            return torch.tensor([float(token_logprobs[b][mask[b]].sum()) for b in range(len(mask))])
    '''),
    _w("1b-nan-to-num", S1B, "1b multiplies by the mask and hides the nan with nan_to_num (a real -inf token becomes a "
       "huge negative number)", '''
        def sequence_logprob(token_logprobs, mask):
            return torch.nan_to_num(token_logprobs * mask).sum(dim=-1)
    '''),
    # ---- 2 sample_with_temperature
    _w("2-top-k", S2, "2 samples among the 50 likeliest tokens only: the tail of a large vocabulary is never drawn", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1)
            top = torch.topk(logits / temperature, k=min(50, logits.shape[-1]), dim=-1)
            pick = torch.multinomial(torch.softmax(top.values, dim=-1), 1, generator=generator)
            return top.indices.gather(-1, pick).squeeze(-1)
    '''),
    _w("2-global-seed", S2, "2 re-seeds the global RNG from the generator's seed and samples with it", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1)
            if generator is not None:
                torch.manual_seed(generator.initial_seed())
            return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)
    '''),
    _w("2-squeeze", S2, "2 squeeze(): a batch of one comes back as a 0-dim tensor", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1)
            return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze()
    '''),
    _w("2-new-generator", S2, "2 makes a fresh generator from the given one's seed on every call (the same draws each "
       "call)", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1)
            g = torch.Generator().manual_seed(generator.initial_seed()) if generator is not None else None
            return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=g).squeeze(-1)
    '''),
    _w("2-greedy-keepdim", S2, "2 T = 0 returns the argmax with keepdim=True: shape [B, 1] instead of [B]", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1, keepdim=True)
            return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(-1)
    '''),
    _w("2-float16", S2, "2 softmax in float16 to save memory: small probabilities flush to zero, the tail is never "
       "drawn", '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("negative temperature")
            if temperature == 0:
                return logits.argmax(dim=-1)
            probs = torch.softmax((logits / temperature).half(), dim=-1).float()
            return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    '''),
    # ---- 3 kl_estimators
    _w("3-stacked", S3, "3 returns one stacked tensor [3, ...] where a tuple is documented", '''
        def kl_estimators(logp, logp_ref):
            l = logp - logp_ref
            return torch.stack([l, 0.5 * l ** 2, torch.exp(-l) - 1 + l])
    '''),
    _w("3-list", S3, "3 returns a list where a tuple is documented", '''
        def kl_estimators(logp, logp_ref):
            l = logp - logp_ref
            return [l, 0.5 * l ** 2, torch.exp(-l) - 1 + l]
    '''),
    _w("3-float32", S3, "3 casts to float32: float64 log-probs come back float32", '''
        def kl_estimators(logp, logp_ref):
            l = (logp - logp_ref).float()
            return l, 0.5 * l ** 2, torch.exp(-l) - 1 + l
    '''),
    _w("3-prob-ratio", S3, "3 k3 from a ratio of probabilities: 0 / 0 for very unlikely tokens", '''
        def kl_estimators(logp, logp_ref):
            l = logp - logp_ref
            return l, 0.5 * l ** 2, torch.exp(logp_ref) / torch.exp(logp) - 1 + l
    '''),
    _w("3-detach", S3, "3 detaches the log-ratio: no gradient through the estimators", '''
        def kl_estimators(logp, logp_ref):
            l = (logp - logp_ref).detach()
            return l, 0.5 * l ** 2, torch.exp(-l) - 1 + l
    '''),
    _w("3-in-place", S3, "3 subtracts in place into the caller's logp", '''
        def kl_estimators(logp, logp_ref):
            l = logp.sub_(logp_ref)
            return l.clone(), 0.5 * l ** 2, torch.exp(-l) - 1 + l
    '''),
    # ---- 4 tilted_optimum and kl_objective
    _w("4-eps-log", S4, "4 log(pi_ref + 1e-12): a response pi_ref never writes gets probability at small beta", '''
        def tilted_optimum(ref_probs, rewards, beta):
            z = np.log(np.asarray(ref_probs, dtype=float) + 1e-12) + np.asarray(rewards, dtype=float) / beta
            w = np.exp(z - z.max())
            return w / w.sum()
    ''' + _KL_OBJ),
    _w("4-rewards-in-place", S4, "4 divides the caller's rewards by beta in place", '''
        def tilted_optimum(ref_probs, rewards, beta):
            rewards = np.asarray(rewards)
            rewards /= beta                                      # np.asarray does not copy
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(ref_probs, dtype=float)) + rewards
            w = np.exp(z - z.max())
            return w / w.sum()
    ''' + _KL_OBJ),
    _w("4-list", S4, "4 returns a Python list where an array is documented", '''
        def tilted_optimum(ref_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(ref_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            w = np.exp(z - z.max())
            return list(w / w.sum())
    ''' + _KL_OBJ),
    _w("4-kl-no-beta", S4, "4 kl_objective drops beta in front of the KL", '''
        def tilted_optimum(ref_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(ref_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            w = np.exp(z - z.max())
            return w / w.sum()

        def kl_objective(probs, ref_probs, rewards, beta):
            probs = np.asarray(probs, dtype=float)
            s = probs > 0
            return float(probs @ rewards - np.sum(probs[s] * np.log(probs[s] / np.asarray(ref_probs)[s])))
    '''),
    _w("4-float32", S4, "4 computes in float32 (pi* off by 1e-7 and not a float64 array)", '''
        def tilted_optimum(ref_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(ref_probs, dtype=np.float32)) + np.asarray(rewards, dtype=np.float32) / np.float32(beta)
            w = np.exp(z - z.max())
            return w / w.sum()
    ''' + _KL_OBJ),
    _w("4-kl-returns-array", S4, "4 kl_objective returns a 1-element array instead of a float", '''
        def tilted_optimum(ref_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(ref_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            w = np.exp(z - z.max())
            return w / w.sum()

        def kl_objective(probs, ref_probs, rewards, beta):
            probs = np.asarray(probs, dtype=float)
            s = probs > 0
            kl = np.sum(probs[s] * np.log(probs[s] / np.asarray(ref_probs, dtype=float)[s]), keepdims=True)
            return probs @ np.asarray(rewards, dtype=float) - beta * kl
    '''),
    # ---- 5 token_level_optimum
    _w("5-global-max", S5, "5 log-sum-exp shifted by the largest entry of the whole matrix: a row far below it "
       "underflows at small beta", '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(second_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            m = z.max()
            with np.errstate(divide="ignore"):
                values = beta * (np.log(np.exp(z - m).sum(axis=1)) + m)
            pi_second = np.exp(z - values[:, None] / beta)
            return tilted_optimum(first_probs, values, beta), pi_second, values
    '''),
    _w("5-first-beta-one", S5, "5 tilts the first token with beta = 1 instead of beta", '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(second_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            values = beta * np.logaddexp.reduce(z, axis=1)
            pi_second = np.exp(z - values[:, None] / beta)
            return tilted_optimum(first_probs, values, 1.0), pi_second, values
    '''),
    _w("5-squeeze", S5, "5 np.squeeze on the results: one first token (A = 1) loses its axis", '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(second_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            values = beta * np.logaddexp.reduce(z, axis=1)
            pi_second = np.exp(z - values[:, None] / beta)
            return np.squeeze(tilted_optimum(first_probs, values, beta)), np.squeeze(pi_second), np.squeeze(values)
    '''),
    _w("5-rewards-in-place", S5, "5 divides the caller's rewards by beta in place", '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            rewards = np.asarray(rewards)
            rewards /= beta
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(second_probs, dtype=float)) + rewards
            values = beta * np.logaddexp.reduce(z, axis=1)
            pi_second = np.exp(z - values[:, None] / beta)
            return tilted_optimum(first_probs, values, beta), pi_second, values
    '''),
    _w("5-list", S5, "5 returns a list [pi_first, pi_second, values] where a tuple is documented", '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(np.asarray(second_probs, dtype=float)) + np.asarray(rewards, dtype=float) / beta
            values = beta * np.logaddexp.reduce(z, axis=1)
            pi_second = np.exp(z - values[:, None] / beta)
            return [tilted_optimum(first_probs, values, beta), pi_second, values]
    '''),
]

RIGHT = [
    Entry("right-ho-a", NB, "hold-out: correct in other ways (unbind + stack, logsumexp, Gumbel-max with the "
          "generator's exponentials, log1p, per-row tilted_optimum, nansum)", [
        solve(S1A, '''
            def response_logprobs(logits, tokens, prompt_len):
                scored = logits[:, prompt_len - 1:tokens.shape[1] - 1]
                picked = torch.gather(scored, 2, tokens[:, prompt_len:, None]).squeeze(2)
                return picked - torch.logsumexp(scored, dim=2)
        '''),
        solve(S1B, '''
            def sequence_logprob(token_logprobs, mask):
                return torch.stack([torch.where(m, lp, lp.new_zeros(())).sum() for lp, m in zip(token_logprobs.unbind(0), mask.unbind(0))])
        '''),
        solve(S2, '''
            def sample_with_temperature(logits, temperature, generator=None):
                if temperature < 0:
                    raise ValueError(f"temperature {temperature} is negative")
                if temperature == 0:
                    return logits.max(dim=-1).indices
                probs = torch.softmax(logits / temperature, dim=-1)
                return torch.multinomial(probs, num_samples=1, replacement=True, generator=generator).view(-1)
        '''),
        solve(S3, '''
            def kl_estimators(logp, logp_ref):
                l = logp - logp_ref
                k3 = torch.expm1(-l) + l
                return (l, l.square() / 2, k3)
        '''),
        solve(S4, '''
            def tilted_optimum(ref_probs, rewards, beta):
                ref_probs = np.asarray(ref_probs, dtype=float)
                z = np.full(ref_probs.shape, -np.inf)
                pos = ref_probs > 0
                z[pos] = np.log(ref_probs[pos]) + np.asarray(rewards, dtype=float)[pos] / beta
                return np.exp(z - np.logaddexp.reduce(z))

            def kl_objective(probs, ref_probs, rewards, beta):
                p, q = np.asarray(probs, dtype=float), np.asarray(ref_probs, dtype=float)
                with np.errstate(divide="ignore", invalid="ignore"):
                    kl = np.nansum(p * np.log(p / q))
                return float(np.dot(p, rewards) - beta * kl)
        '''),
        solve(S5, '''
            def token_level_optimum(first_probs, second_probs, rewards, beta):
                second_probs = np.asarray(second_probs, dtype=float)
                rewards = np.asarray(rewards, dtype=float)
                pi_second = np.stack([tilted_optimum(second_probs[i], rewards[i], beta) for i in range(len(second_probs))])
                with np.errstate(divide="ignore"):
                    z = np.log(second_probs) + rewards / beta
                values = beta * np.logaddexp.reduce(z, axis=-1)
                return tilted_optimum(first_probs, values, beta), pi_second, values
        '''),
    ]),
    Entry("right-ho-b", NB, "hold-out: correct in yet other ways (einsum one-hot, masked_select + split, "
          "torch.distributions.Categorical with the generator, a max-shifted loop)", [
        solve(S1A, '''
            def response_logprobs(logits, tokens, prompt_len):
                logp = logits.log_softmax(-1)[:, prompt_len - 1:-1]
                onehot = torch.nn.functional.one_hot(tokens[:, prompt_len:], logits.shape[-1]).to(logp.dtype)
                return torch.where(onehot.bool(), logp, torch.zeros_like(logp)).sum(-1)
        '''),
        solve(S1B, '''
            def sequence_logprob(token_logprobs, mask):
                return token_logprobs.masked_fill(mask.logical_not(), 0).sum(1)
        '''),
        solve(S2, '''
            def sample_with_temperature(logits, temperature, generator=None):
                if temperature < 0:
                    raise ValueError("temperature must be >= 0")
                if temperature == 0:
                    return logits.argmax(-1)
                scaled = logits / temperature
                probs = (scaled - scaled.logsumexp(-1, keepdim=True)).exp()
                return torch.multinomial(probs, 1, generator=generator)[..., 0]
        '''),
        solve(S4, '''
            def tilted_optimum(ref_probs, rewards, beta):
                q = np.asarray(ref_probs, dtype=float)
                r = np.asarray(rewards, dtype=float)
                with np.errstate(divide="ignore"):
                    z = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)) + r / beta, -np.inf)
                z = z - np.max(z[np.isfinite(z)])
                w = np.exp(z)
                return w / np.sum(w)

            def kl_objective(probs, ref_probs, rewards, beta):
                value = 0.0
                for p, q, r in zip(np.asarray(probs, float), np.asarray(ref_probs, float), np.asarray(rewards, float)):
                    value += p * r
                    if p > 0:
                        value -= beta * p * math.log(p / q)
                return float(value)
        '''),
        solve(S5, '''
            def token_level_optimum(first_probs, second_probs, rewards, beta):
                q = np.asarray(second_probs, dtype=float)
                r = np.asarray(rewards, dtype=float)
                with np.errstate(divide="ignore"):
                    z = np.log(q) + r / beta
                m = np.max(z, axis=1, keepdims=True)
                lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
                values = beta * lse
                return tilted_optimum(first_probs, values, beta), np.exp(z - lse[:, None]), values
        '''),
    ]),
]

HOLDOUT = WRONG + RIGHT
