"""hw4 hold-out set: wrong answers nobody listed before, and more correct ones.

Written before the contract tests (see _holdout_lab11.py for how they are used).
"""

from autograder.corpus import Entry, solve

NB = "llm_rl"
S = {i: n for i, n in enumerate(
    ["task1_per_token_logprobs", "task2_completion_mask", "task3_approx_kl", "task4_iter_minibatches",
     "task5_group_advantages", "task6_normalize_advantages", "task7_reinforce_loss", "task8_grpo_loss"], start=1)}


def _w(name, i, what, code):
    return Entry(f"wrong-ho-{name}", NB, what, [solve(S[i], code)])


_GRPO = '''
def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
    zeros = torch.zeros_like(logprobs)
    ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, zeros))
    adv = advantages[:, None]
'''
_GRPO_TAIL = '''
    per_seq = torch.where(mask, surrogate, zeros).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
'''

WRONG = [
    # ---- 1 compute_per_token_logprobs
    _w("1-bf16-only", 1, "1 casts only bf16 logits: float16 and float64 logits keep their dtype", '''
        def compute_per_token_logprobs(logits, input_ids):
            if logits.dtype == torch.bfloat16:
                logits = logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    '''),
    _w("1-squeeze", 1, "1 squeeze(): a batch of one (or T = 2) loses an axis", '''
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze()
    '''),
    _w("1-no-grad", 1, "1 under torch.no_grad() ('it only scores tokens'): no gradient reaches the logits", '''
        @torch.no_grad()
        def compute_per_token_logprobs(logits, input_ids):
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    '''),
    _w("1-in-place", 1, "1 subtracts the max from the caller's logits in place for stability", '''
        def compute_per_token_logprobs(logits, input_ids):
            logits -= logits.max(dim=-1, keepdim=True).values
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    '''),
    # ---- 2 build_completion_mask
    _w("2-in-place", 2, "2 zeroes the prompt columns of the caller's attention_mask in place", '''
        def build_completion_mask(attention_mask, prompt_len):
            attention_mask[:, :prompt_len] = 0
            return attention_mask[:, 1:].bool()
    '''),
    _w("2-first-real", 2, "2 counts the prompt from each row's first real token (left padding taken for the prompt's "
       "start)", '''
        def build_completion_mask(attention_mask, prompt_len):
            am = attention_mask.long()
            start = am.argmax(dim=1, keepdim=True)                  # first real column of each row
            cols = torch.arange(1, am.shape[1])[None, :]
            return am[:, 1:].bool() & (cols >= start + prompt_len)
    '''),
    _w("2-long", 2, "2 returns the product of two long tensors for a long attention_mask (not bool)", '''
        def build_completion_mask(attention_mask, prompt_len):
            T = attention_mask.shape[1]
            cols = (torch.arange(1, T) >= prompt_len).to(attention_mask.dtype)
            return attention_mask[:, 1:] * cols
    '''),
    _w("2-row-zero", 2, "2 builds the mask of row 0 and expands it over the batch", '''
        def build_completion_mask(attention_mask, prompt_len):
            B, T = attention_mask.shape
            row = attention_mask[0, 1:].bool() & (torch.arange(1, T) >= prompt_len)
            return row.expand(B, -1)
    '''),
    # ---- 3 approx_kl_from_logprobs
    _w("3-per-sequence", 3, "3 a per-sequence KL (k3 summed over each completion, then the mean over rows)", '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
            k3 = torch.where(mask, torch.exp(delta) - delta - 1.0, torch.zeros_like(delta))
            return k3.sum(dim=1).mean()
    '''),
    _w("3-clamp-10", 3, "3 clamps delta to [-10, 10] instead of [-20, 20]", '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (ref_logprobs - logprobs).clamp(-10.0, 10.0)
            k3 = torch.exp(delta) - delta - 1.0
            return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
    '''),
    _w("3-item", 3, "3 returns torch.tensor(value.item()): the right number, no gradient", '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
            k3 = torch.exp(delta) - delta - 1.0
            return torch.tensor(k3[mask].mean().item())
    '''),
    _w("3-clamp-k3", 3, "3 clamps k3 at e^20 instead of clamping delta (the low side is never clamped)", '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = ref_logprobs - logprobs
            k3 = (torch.exp(delta) - delta - 1.0).clamp(max=math.exp(20) - 21)
            return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
    '''),
    _w("3-float32", 3, "3 a float32 result for float64 log-probs", '''
        def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
            delta = (ref_logprobs - logprobs).float().clamp(-20.0, 20.0)
            k3 = torch.exp(delta) - delta - 1.0
            return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
    '''),
    # ---- 4 iter_minibatches
    _w("4-argsort", 4, "4 shuffles with torch.rand(n, generator).argsort() instead of torch.randperm: another order "
       "than the documented one", '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            sizes = {k: v.shape[0] for k, v in batch.items()}
            if len(set(sizes.values())) != 1:
                raise ValueError(f"row counts differ: {sizes}")
            n = next(iter(sizes.values()))
            order = torch.rand(n, generator=generator).argsort() if generator is not None else torch.arange(n)
            for start in range(0, n, minibatch_size):
                rows = order[start:start + minibatch_size]
                yield {k: v[rows] for k, v in batch.items()}
    '''),
    _w("4-shuffle-blocks", 4, "4 shuffles the order of the minibatches, not the rows", '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            sizes = {k: v.shape[0] for k, v in batch.items()}
            if len(set(sizes.values())) != 1:
                raise ValueError(f"row counts differ: {sizes}")
            n = next(iter(sizes.values()))
            starts = list(range(0, n, minibatch_size))
            if generator is not None:
                starts = [starts[i] for i in torch.randperm(len(starts), generator=generator).tolist()]
            for start in starts:
                yield {k: v[start:start + minibatch_size] for k, v in batch.items()}
    '''),
    _w("4-mutates-batch", 4, "4 shuffles the caller's dict in place (batch[k] = v[order])", '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            sizes = {k: v.shape[0] for k, v in batch.items()}
            if len(set(sizes.values())) != 1:
                raise ValueError(f"row counts differ: {sizes}")
            n = next(iter(sizes.values()))
            if generator is not None:
                order = torch.randperm(n, generator=generator)
                for k in list(batch):
                    batch[k] = batch[k][order]
            for start in range(0, n, minibatch_size):
                yield {k: v[start:start + minibatch_size] for k, v in batch.items()}
    '''),
    _w("4-reseed", 4, "4 re-seeds the generator it is given (every pass visits the rows in the same order)", '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            sizes = {k: v.shape[0] for k, v in batch.items()}
            if len(set(sizes.values())) != 1:
                raise ValueError(f"row counts differ: {sizes}")
            n = next(iter(sizes.values()))
            if generator is not None:
                generator.manual_seed(generator.initial_seed())
            order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
            for start in range(0, n, minibatch_size):
                rows = order[start:start + minibatch_size]
                yield {k: v[rows] for k, v in batch.items()}
    '''),
    _w("4-global-rng", 4, "4 seeds the global RNG from the generator and shuffles with it", '''
        def iter_minibatches(batch, minibatch_size, generator=None):
            sizes = {k: v.shape[0] for k, v in batch.items()}
            if len(set(sizes.values())) != 1:
                raise ValueError(f"row counts differ: {sizes}")
            n = next(iter(sizes.values()))
            if generator is not None:
                torch.manual_seed(generator.initial_seed())
                order = torch.randperm(n)
            else:
                order = torch.arange(n)
            for start in range(0, n, minibatch_size):
                rows = order[start:start + minibatch_size]
                yield {k: v[rows] for k, v in batch.items()}
    '''),
    # ---- 5 compute_group_advantages
    _w("5-eps-ignored", 5, "5 divides by std + 1e-6 whatever eps says", '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            if rewards.shape[0] % group_size:
                raise ValueError("B must be a multiple of group_size")
            r = rewards.double().view(-1, group_size)
            adv = (r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-6)
            return adv.reshape(-1).float()
    '''),
    _w("5-eps-in-sqrt", 5, "5 eps inside the square root: sqrt(var + eps)", '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            if rewards.shape[0] % group_size:
                raise ValueError("B must be a multiple of group_size")
            r = rewards.double().view(-1, group_size)
            adv = (r - r.mean(1, keepdim=True)) / torch.sqrt(r.var(1, unbiased=False, keepdim=True) + eps)
            return adv.reshape(-1).float()
    '''),
    _w("5-strided", 5, "5 groups strided rows (view(G, -1).T) instead of adjacent ones", '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            if rewards.shape[0] % group_size:
                raise ValueError("B must be a multiple of group_size")
            r = rewards.double().view(group_size, -1).T
            adv = (r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + eps)
            return adv.T.reshape(-1).float()
    '''),
    _w("5-eps-clamp", 5, "5 std clamped at eps instead of std + eps", '''
        def compute_group_advantages(rewards, group_size, eps=1e-6):
            if rewards.shape[0] % group_size:
                raise ValueError("B must be a multiple of group_size")
            r = rewards.double().view(-1, group_size)
            adv = (r - r.mean(1, keepdim=True)) / r.std(1, unbiased=False, keepdim=True).clamp(min=eps)
            return adv.reshape(-1).float()
    '''),
    # ---- 6 maybe_normalize_advantages
    _w("6-eps-ignored", 6, "6 divides by std + 1e-6 whatever eps says", '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages.clone()
            if normalize:
                adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-6)
            return adv if clip is None else adv.clamp(-clip, clip)
    '''),
    _w("6-clip-upper", 6, "6 clips the upper side only", '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages.clone()
            if normalize:
                adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
            return adv if clip is None else adv.clamp(max=clip)
    '''),
    _w("6-float32", 6, "6 a float32 result for float64 advantages", '''
        def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
            adv = advantages.float().clone()
            if normalize:
                adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
            return adv if clip is None else adv.clamp(-clip, clip)
    '''),
    _w("6-clip-default", 6, "6 the clip default changed to 1.0", '''
        def maybe_normalize_advantages(advantages, normalize, clip=1.0, eps=1e-6):
            adv = advantages.clone()
            if normalize:
                adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
            return adv if clip is None else adv.clamp(-clip, clip)
    '''),
    # ---- 7 reinforce_loss
    _w("7-kl-per-sequence", 7, "7 a per-sequence KL: k3 summed over each completion, then the mean over rows", '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            n = mask.sum(dim=1).clamp(min=1)
            seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n
            delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
            k3 = torch.where(mask, torch.exp(delta) - delta - 1.0, torch.zeros_like(delta))
            return -(advantages * seq).mean() + kl_coef * k3.sum(dim=1).mean()
    '''),
    _w("7-kl-detached", 7, "7 the KL term computed on detached log-probs (no gradient from it)", '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            n = mask.sum(dim=1).clamp(min=1)
            seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n
            return -(advantages * seq).mean() + kl_coef * approx_kl_from_logprobs(logprobs.detach(), ref_logprobs, mask)
    '''),
    _w("7-kl-coef-constant", 7, "7 kl_coef replaced by the default 0.05", '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            n = mask.sum(dim=1).clamp(min=1)
            seq = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n
            return -(advantages * seq).mean() + 0.05 * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
    _w("7-float32", 7, "7 a float32 token count makes a float64 loss float32", '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            n = mask.float().sum(dim=1).clamp(min=1)
            seq = (torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=1) / n).float()
            return -(advantages.float() * seq).mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask).float()
    '''),
    _w("7-in-place", 7, "7 zeroes the padding of the caller's log-probs in place (masked_fill_)", '''
        def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
            kl = approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
            lp = logprobs.masked_fill_(~mask, 0.0)
            seq = lp.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            return -(advantages * seq).mean() + kl_coef * kl
    '''),
    # ---- 8 grpo_loss
    _w("8-clip-constant", 8, "8 clips at 0.8 and 1.2 whatever clip_eps says", _GRPO + '''
            surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    ''' + _GRPO_TAIL),
    _w("8-log-clip", 8, "8 clips the log-ratio to [-eps, eps] (a ratio range of [0.819, 1.221])", '''
        def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
            zeros = torch.zeros_like(logprobs)
            log_ratio = torch.where(mask, logprobs - old_logprobs, zeros)
            ratio = log_ratio.exp()
            adv = advantages[:, None]
            surrogate = torch.minimum(ratio * adv, log_ratio.clamp(-clip_eps, clip_eps).exp() * adv)
    ''' + _GRPO_TAIL),
    _w("8-kl-old", 8, "8 the KL to the old policy instead of the reference", _GRPO + '''
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
            per_seq = torch.where(mask, surrogate, zeros).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, old_logprobs, mask)
    '''),
    _w("8-kl-coef-constant", 8, "8 kl_coef replaced by the default 0.05", _GRPO + '''
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
            per_seq = torch.where(mask, surrogate, zeros).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            return -per_seq.mean() + 0.05 * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
    '''),
    _w("8-float32", 8, "8 float32 advantages make a float64 loss float32", _GRPO + '''
            adv = adv.float()
            surrogate = torch.minimum(ratio.float() * adv, ratio.float().clamp(1 - clip_eps, 1 + clip_eps) * adv)
            per_seq = torch.where(mask, surrogate, zeros.float()).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            return -per_seq.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask).float()
    '''),
]

RIGHT = [
    Entry("right-ho-a", NB, "hold-out: correct in other ways (take_along_dim, ne(0), expm1, index_select with "
          "randperm, unbiased=False via var, where-based clip)", [
        solve(S[1], '''
            def compute_per_token_logprobs(logits, input_ids):
                z = logits.to(torch.float32)[:, :-1]
                picked = torch.take_along_dim(z, input_ids[:, 1:, None], dim=-1)[..., 0]
                return picked - torch.logsumexp(z, dim=-1)
        '''),
        solve(S[2], '''
            def build_completion_mask(attention_mask, prompt_len):
                real = attention_mask[:, 1:].ne(0)
                real[:, : max(prompt_len - 1, 0)] = False
                return real
        '''),
        solve(S[3], '''
            def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
                d = (ref_logprobs - logprobs).clamp(min=-20, max=20)
                k3 = torch.expm1(d) - d
                return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
        '''),
        solve(S[4], '''
            def iter_minibatches(batch, minibatch_size, generator=None):
                lengths = {len(v) for v in batch.values()}
                if len(lengths) > 1:
                    raise ValueError(f"fields have different row counts: {sorted(lengths)}")
                (n,) = lengths
                order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
                i = 0
                while i < n:
                    rows = order[i:i + minibatch_size]
                    yield {k: v.index_select(0, rows) for k, v in batch.items()}
                    i += minibatch_size
        '''),
        solve(S[5], '''
            def compute_group_advantages(rewards, group_size, eps=1e-6):
                if rewards.numel() % group_size != 0:
                    raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
                g = rewards.to(torch.float64).unflatten(0, (-1, group_size))
                sd = g.var(dim=1, unbiased=False, keepdim=True).sqrt()
                return ((g - g.mean(dim=1, keepdim=True)) / (sd + eps)).flatten().to(torch.float32)
        '''),
        solve(S[6], '''
            def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
                out = advantages * 1.0
                if normalize:
                    out = (out - out.mean()) / (out.std(unbiased=False) + eps)
                if clip is not None:
                    out = torch.where(out > clip, torch.full_like(out, clip), out)
                    out = torch.where(out < -clip, torch.full_like(out, -clip), out)
                return out
        '''),
        solve(S[7], '''
            def reinforce_loss(logprobs, ref_logprobs, mask, advantages, kl_coef):
                lens = mask.sum(-1).clamp(min=1).to(logprobs.dtype)
                per_row = logprobs.masked_fill(~mask, 0).sum(-1) / lens
                return -(per_row * advantages).sum() / len(advantages) + kl_coef * approx_kl_from_logprobs(
                    logprobs, ref_logprobs, mask)
        '''),
        solve(S[8], '''
            def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
                ratio = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs)).exp()
                a = advantages.view(-1, 1)
                obj = torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * a)
                obj = torch.where(mask, obj, torch.zeros_like(obj))
                pg = obj.sum(-1) / mask.sum(-1).clamp(min=1)
                return -pg.mean() + kl_coef * approx_kl_from_logprobs(logprobs, ref_logprobs, mask)
        '''),
    ]),
    Entry("right-ho-b", NB, "hold-out: correct in yet other ways (a loop over rows, a column mask built with "
          "arange, randperm + split)", [
        solve(S[1], '''
            def compute_per_token_logprobs(logits, input_ids):
                rows = []
                for b in range(logits.shape[0]):
                    lp = torch.log_softmax(logits[b, :-1].float(), dim=-1)
                    rows.append(lp[torch.arange(lp.shape[0]), input_ids[b, 1:]])
                return torch.stack(rows)
        '''),
        solve(S[2], '''
            def build_completion_mask(attention_mask, prompt_len):
                B, T = attention_mask.shape
                cols = torch.arange(T)[None, :].expand(B, T)
                full = (cols >= prompt_len) & attention_mask.bool()
                return full[:, 1:]
        '''),
        solve(S[4], '''
            def iter_minibatches(batch, minibatch_size, generator=None):
                n = {v.shape[0] for v in batch.values()}
                if len(n) != 1:
                    raise ValueError("every field needs the same number of rows")
                n = n.pop()
                perm = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
                for rows in perm.split(minibatch_size):
                    yield {name: t[rows] for name, t in batch.items()}
        '''),
        solve(S[5], '''
            def compute_group_advantages(rewards, group_size, eps=1e-6):
                B = rewards.shape[0]
                if B % group_size:
                    raise ValueError(f"B = {B} is not a multiple of {group_size}")
                out = torch.empty(B, dtype=torch.float64)
                for s in range(0, B, group_size):
                    g = rewards[s:s + group_size].double()
                    out[s:s + group_size] = (g - g.mean()) / (g.std(unbiased=False) + eps)
                return out.float()
        '''),
    ]),
]

HOLDOUT = WRONG + RIGHT
