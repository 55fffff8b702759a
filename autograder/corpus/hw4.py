"""hw4 (llm_rl): realistic answers, two wrong ones per task (the starter code's common bugs).

Tasks 7 and 8 call the student's Task 3 (approx KL); the wrong Task 3 answers here stay finite, so
7 and 8 keep their points (their tests compare with the student's own KL). The report questions
are graded by hand. Each wrong answer loses the test cells of its task that grade the concern it
gets wrong (a task's tests are split by concern; `tests(task, *concerns)` names them).
"""

from autograder.corpus import Entry, solve, standard_entries, tests

NB = "llm_rl"
S = {i: f"task{i}_{n}" for i, n in enumerate(
    ["per_token_logprobs", "completion_mask", "approx_kl", "iter_minibatches", "group_advantages",
     "normalize_advantages", "reinforce_loss", "grpo_loss"], start=1)}

REWRITTEN = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.nn.functional.log_softmax(logits.float(), dim=-1)[:, :-1]
            return torch.gather(logp, 2, input_ids[:, 1:, None])[..., 0]
    '''),
    solve(S[2], '''
        def build_completion_mask(attention_mask, prompt_len):
            cols = torch.arange(attention_mask.shape[1])[1:]
            return (attention_mask[:, 1:] != 0) & (cols >= prompt_len)
    '''),
    solve(S[3], '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            d = torch.clamp(ref_logprobs - logprobs, min=-20.0, max=20.0)
            k3 = (torch.expm1(d) - d).masked_fill(~mask, 0.0)
            return k3.sum() / mask.sum().clamp(min=1)
    '''),
    solve(S[4], '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            counts = {v.shape[0] for v in batch.values()}
            if len(counts) != 1:
                raise ValueError("all fields need the same number of rows")
            n = counts.pop()
            idx = torch.arange(n) if generator is None else torch.randperm(n, generator=generator)
            for rows in torch.split(idx, minibatch_size):
                yield {k: v[rows] for k, v in batch.items()}
    '''),
    solve(S[5], '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            r = rewards.to(torch.float64).reshape(-1, group_size)
            mu = r.mean(1, keepdim=True)
            sd = ((r - mu) ** 2).mean(1, keepdim=True).sqrt()
            return ((r - mu) / (sd + eps)).flatten().to(torch.float32)
    '''),
    solve(S[6], '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            a = advantages.clone()
            if normalize:
                a = (a - a.mean()) / (a.var(unbiased=False).sqrt() + eps)
            return a if clip is None else torch.clamp(a, -clip, clip)
    '''),
    solve(S[7], '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            seq = logprobs.masked_fill(~mask, 0.0).sum(1) / mask.sum(1).clamp(min=1)
            return -(advantages * seq).mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
    solve(S[8], '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0).exp()
            a = advantages.unsqueeze(1)
            obj = torch.min(ratio * a, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * a).masked_fill(~mask, 0.0)
            per_seq = obj.sum(1) / mask.sum(1).clamp(min=1)
            return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]

WRONG_A = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.log_softmax(logits[:, 1:].float(), dim=-1)      # no shift
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    '''),
    solve(S[3], '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (logprobs - ref_logprobs).clamp(-20.0, 20.0)         # log ratio the wrong way round
            k3 = torch.exp(delta) - delta - 1.0
            return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
    '''),
    solve(S[5], '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            r = rewards.view(-1, group_size)
            return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)).reshape(-1)   # sample std
    '''),
    # (not length-normalising would also fail Task 8, whose test compares its gradient with Task 7's)
    solve(S[7], '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            n = mask.sum(dim=1).clamp(min=1)
            seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(1) / n
            return -(advantages * seq).mean()                      # forgot the kl_coef * KL term
    '''),
]
WRONG_B = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.log_softmax(logits[:, :-1], dim=-1)              # stays bfloat16 for bf16 logits
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    '''),
    solve(S[3], '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = torch.where(mask, ref_logprobs - logprobs, torch.zeros_like(logprobs))   # no clamp
            k3 = torch.exp(delta) - delta - 1.0
            return k3.sum() / mask.sum().clamp(min=1)
    '''),
    solve(S[5], '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            r = rewards.float().view(-1, group_size)                    # float32: a constant group is not 0
            return ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + eps)).reshape(-1)
    '''),
    solve(S[7], '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            seq = (logprobs * mask).sum(1) / mask.sum(1).clamp(min=1)    # -inf * 0 = nan
            return -(advantages * seq).mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]
WRONG_C = [
    solve(S[2], '''
        def build_completion_mask(attention_mask, prompt_len):
            T = attention_mask.shape[1]
            return attention_mask[:, :-1].bool() & (torch.arange(T - 1) >= prompt_len)   # off by one
    '''),
    solve(S[4], '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            n = len(next(iter(batch.values())))
            for start in range(0, n, minibatch_size):                    # never shuffles, never checks
                yield {k: v[start:start + minibatch_size] for k, v in batch.items()}
    '''),
    solve(S[6], '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages.clone()
            if clip is not None:
                adv = adv.clamp(-clip, clip)                             # clips before normalising
            if normalize:
                adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
            return adv
    '''),
    solve(S[8], '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            zeros = torch.zeros_like(logprobs)
            ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, zeros))
            adv = advantages[:, None]
            surrogate = torch.maximum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)   # max
            per_seq = torch.where(mask, surrogate, zeros).sum(1) / mask.sum(1).clamp(min=1)
            return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]
WRONG_D = [
    solve(S[2], '''
        def build_completion_mask(attention_mask, prompt_len):
            B, T = attention_mask.shape
            return (torch.arange(1, T) >= prompt_len).expand(B, -1)     # ignores padding
    '''),
    solve(S[4], '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            n = len(next(iter(batch.values())))
            order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
            for start in range(0, n - minibatch_size + 1, minibatch_size):   # drops the last, smaller one
                rows = order[start:start + minibatch_size]
                yield {k: v[rows] for k, v in batch.items()}
    '''),
    solve(S[6], '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages
            if normalize:
                adv -= adv.mean()                                        # changes the caller's tensor
                adv /= adv.std(unbiased=False) + eps
            if clip is not None:
                adv = adv.clamp(-clip, clip)
            return adv
    '''),
    solve(S[8], '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            zeros = torch.zeros_like(logprobs)
            ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, zeros))
            adv = advantages[:, None]
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
            tok = torch.where(mask, surrogate, zeros).sum() / mask.sum().clamp(min=1)   # token mean over the batch
            return -tok + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]

# the traps the first corpus lacked
WRONG_E = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            probs = torch.softmax(logits[:, :-1].float(), dim=-1)         # log of a softmax: -inf when it underflows
            return probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1).log()
    '''),
    solve(S[4], '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            n = len(next(iter(batch.values())))
            if any(len(v) != n for v in batch.values()):
                raise ValueError("fields differ in length")
            # each field shuffled on its own: rows no longer line up across fields
            shuffled = {k: (v[torch.randperm(n, generator=generator)] if generator is not None else v) for k, v in batch.items()}
            for start in range(0, n, minibatch_size):
                yield {k: v[start:start + minibatch_size] for k, v in shuffled.items()}
    '''),
    solve(S[5], '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            out = []
            for i in range(0, len(rewards), group_size):                   # a last, partial group passes silently
                g = rewards[i:i + group_size].double()
                out.append((g - g.mean()) / (g.std(unbiased=False) + eps))
            return torch.cat(out).float()
    '''),
    solve(S[8], '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            ratio = torch.exp(logprobs - old_logprobs)                   # -inf - -inf = nan at the padding
            adv = advantages[:, None]
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
            per_seq = torch.where(mask, surrogate, torch.zeros_like(surrogate)).sum(1) / mask.sum(1).clamp(min=1)
            return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]
WRONG_F = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            logits = logits[:, :-1].float()                                  # the raw logits: no log_softmax
            return logits.gather(2, input_ids[:, 1:].unsqueeze(2)).squeeze(2)
    '''),
    solve(S[3], '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
            k3 = torch.where(mask, torch.exp(delta) - delta - 1.0, torch.zeros_like(delta))
            return (k3.sum(1) / mask.sum(1).clamp(min=1)).mean()             # mean of per-row means
    '''),
    solve(S[6], '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages.clone()
            if normalize:
                adv = (adv - adv.mean()) / (adv.std() + eps)                 # the sample std
            return adv if clip is None else adv.clamp(-clip, clip)
    '''),
    solve(S[7], '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(1)   # a sum: long completions count more
            return -(advantages * seq).mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]
RIGHT_B = [
    solve(S[1], '''
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.log_softmax(logits[:, :-1], dim=-1, dtype=torch.float32)
            return logp.gather(2, input_ids[:, 1:].unsqueeze(2)).squeeze(2)
    '''),
    solve(S[4], '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            rows = {k: v.shape[0] for k, v in batch.items()}
            if len(set(rows.values())) > 1:
                raise ValueError(f"row counts differ: {rows}")
            n = next(iter(rows.values()))
            order = torch.arange(n) if generator is None else torch.randperm(n, generator=generator)
            for chunk in order.split(minibatch_size):
                yield {k: v.index_select(0, chunk) for k, v in batch.items()}
    '''),
    solve(S[8], '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            log_ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0)
            ratio = log_ratio.exp()
            a = advantages.unsqueeze(-1)
            unclipped, clipped = ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a
            obj = torch.where(unclipped < clipped, unclipped, clipped).masked_fill(~mask, 0.0)
            pg = -(obj.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
            return pg + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
]

ENTRIES = standard_entries(NB) + [
    Entry("rewritten", NB, "every task correct, written differently", REWRITTEN),
    Entry("wrong-a", NB, "1 no shift, 3 ratio upside down, 5 sample std, 7 without the KL term",
          WRONG_A, lose=tests(S[1], "values", "edge", "grad") + tests(S[3], "values", "edge", "grad") + tests(S[5], "values", "contract", "edge") + tests(S[7], "kl", "grad")),
    Entry("wrong-b", NB, "1 stays bf16, 3 no clamp, 5 float32, 7 multiplies by the mask",
          WRONG_B, lose=tests(S[1], "contract", "edge") + tests(S[3], "edge") + tests(S[5], "edge") + tests(S[7], "values")),
    Entry("wrong-c", NB, "2 off by one, 4 never shuffles, 6 clips first, 8 max instead of min",
          WRONG_C, lose=tests(S[2], "values") + tests(S[4], "rng", "contract") + tests(S[6], "values") + tests(S[8], "values", "clip", "grad")),
    Entry("wrong-d", NB, "2 ignores padding, 4 drops the last minibatch, 6 in place, 8 batch token mean",
          WRONG_D, lose=tests(S[2], "values") + tests(S[4], "values", "rng", "contract") + tests(S[6], "contract") + tests(S[8], "values", "grad")),
    Entry("wrong-e", NB, "1 log of a softmax (underflow), 4 shuffles each field on its own, 5 a loop that lets a "
          "partial group through, 8 exp of an unmasked log-ratio (nan gradient at -inf padding)",
          WRONG_E, lose=tests(S[1], "edge") + tests(S[4], "values") + tests(S[5], "contract") + tests(S[8], "grad")),
    Entry("wrong-f", NB, "1 gathers the raw logits (no log_softmax), 3 mean of per-row means, 6 the sample std, 7 no "
          "length normalisation", WRONG_F, lose=tests(S[1], "values", "edge") + tests(S[3], "values", "edge") + tests(S[6], "values") + tests(S[7], "values", "grad")),
    Entry("right-b", NB, "tasks 1, 4, 8 correct in yet another way (log_softmax(dtype=float32), index_select on "
          "randperm's split, torch.where for the min)", RIGHT_B),
]
