"""lab21 hold-out set: wrong answers nobody listed before, and more correct ones.

Written before the contract tests (see _holdout_lab11.py for how they are used).
"""

from autograder.corpus import Entry, solve

NB = "tasks"
S1, S2, S3, S4, S5 = ("task1_reverse_kl_rewards", "task2_opd_pg_loss", "task3_full_vocab_reverse_kl",
                      "task4_pass_at_k", "task5_maxrl_advantages")


def _w(name, sol, what, code):
    return Entry(f"wrong-ho-{name}", NB, what, [solve(sol, code)])


WRONG = [
    # ---- 1 reverse_kl_rewards
    _w("1-float32", S1, "1 fills a float32 buffer: float64 log-probs give float32 rewards", '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = torch.zeros(mask.shape)
            r[mask] = (teacher_logprobs - student_logprobs).detach()[mask]
            return r
    '''),
    _w("1-in-place", S1, "1 subtracts into the caller's teacher log-probs in place", '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = teacher_logprobs.sub_(student_logprobs.detach())
            return torch.where(mask, r, torch.zeros_like(r))
    '''),
    _w("1-grad-kept", S1, "1 detaches the student but keeps the teacher's graph (a teacher with grad leaks "
       "through)", '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = teacher_logprobs - student_logprobs.detach()
            return torch.where(mask, r, torch.zeros_like(r))
    '''),
    _w("1-nan-padding", S1, "1 selects with where but computes a nan at -inf/-inf padding first and fixes it with "
       "nan_to_num (a real -inf reward becomes a huge finite number)", '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = torch.nan_to_num((teacher_logprobs - student_logprobs).detach() * mask)
            return r
    '''),
    # ---- 2 opd_pg_loss
    _w("2-seq-mean", S2, "2 a mean per sequence, then over the sequences (not the token-level mean)", '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return -((r * lp).sum(1) / mask.sum(1).clamp(min=1)).mean()
    '''),
    _w("2-float32", S2, "2 a float32 count makes a float64 loss float32", '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return (-(r * lp).sum() / mask.float().sum()).float()
    '''),
    _w("2-teacher-lp", S2, "2 weights the teacher's log-prob instead of the student's (no gradient to the student)", '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, teacher_logprobs, torch.zeros_like(teacher_logprobs))
            return -(r * lp).sum() / mask.sum().clamp(min=1) + 0 * student_logprobs.sum()
    '''),
    _w("2-reward-minus", S2, "2 loss r * log pi (sign flipped: gradient ascent on the KL)", '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return (r * lp).sum() / mask.sum().clamp(min=1)
    '''),
    # ---- 3 full_vocab_reverse_kl
    _w("3-seq-mean", S3, "3 a mean per sequence, then over the sequences", '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, -1)
            lq = torch.log_softmax(teacher_logits, -1)
            kl = torch.where(mask, (lp.exp() * (lp - lq)).sum(-1), torch.zeros(mask.shape))
            return (kl.sum(1) / mask.sum(1).clamp(min=1)).mean()
    '''),
    _w("3-detached-weights", S3, "3 detaches the student's probabilities used as weights (half the gradient)", '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, -1)
            lq = torch.log_softmax(teacher_logits, -1)
            kl = (lp.exp().detach() * (lp - lq)).sum(-1)
            return torch.where(mask, kl, torch.zeros_like(kl)).sum() / mask.sum().clamp(min=1)
    '''),
    _w("3-float32", S3, "3 casts the logits to float32: a float64 batch gives a float32 KL", '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits.float(), -1)
            lq = torch.log_softmax(teacher_logits.float(), -1)
            kl = (lp.exp() * (lp - lq)).sum(-1)
            return torch.where(mask, kl, torch.zeros_like(kl)).sum() / mask.sum().clamp(min=1)
    '''),
    _w("3-kl-div-batchmean", S3, "3 F.kl_div with reduction='batchmean' over the masked rows (divides by B, and "
       "the arguments the wrong way round)", '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits[mask], -1)
            lq = torch.log_softmax(teacher_logits[mask], -1)
            return torch.nn.functional.kl_div(lp, lq, log_target=True, reduction="batchmean")
    '''),
    _w("3-clamped", S3, "3 clamps the log-probs at -30 to avoid inf (wrong for very confident logits)", '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, -1).clamp(min=-30)
            lq = torch.log_softmax(teacher_logits, -1).clamp(min=-30)
            kl = (lp.exp() * (lp - lq)).sum(-1)
            return torch.where(mask, kl, torch.zeros_like(kl)).sum() / mask.sum().clamp(min=1)
    '''),
    # ---- 4 pass_at_k
    _w("4-int-return", S4, "4 returns the int 1 or 0 at the edges where a float is documented", '''
        def pass_at_k(n, c, k):
            if n - c < k:
                return 1
            if c == 0:
                return 0
            prod = 1.0
            for i in range(n - c + 1, n + 1):
                prod *= 1.0 - k / i
            return 1.0 - prod
    '''),
    _w("4-lgamma", S4, "4 log-gamma without the n - c < k case (a math domain error there)", '''
        def pass_at_k(n, c, k):
            lg = math.lgamma
            log_ratio = lg(n - c + 1) - lg(n - c - k + 1) - lg(n + 1) + lg(n - k + 1)
            return 1.0 - math.exp(log_ratio)
    '''),
    _w("4-float32", S4, "4 a numpy float32 product (off by about 1e-7)", '''
        def pass_at_k(n, c, k):
            if n - c < k:
                return 1.0
            i = np.arange(n - c + 1, n + 1, dtype=np.float32)
            return float(1.0 - np.prod(np.float32(1.0) - np.float32(k) / i))
    '''),
    _w("4-range-off", S4, "4 the product's range off by one (i from n - c to n - 1)", '''
        def pass_at_k(n, c, k):
            if n - c < k:
                return 1.0
            prod = 1.0
            for i in range(n - c, n):
                prod *= 1.0 - k / i
            return 1.0 - prod
    '''),
    # ---- 5 maxrl_advantages
    _w("5-float32", S5, "5 a float32 buffer: float64 rewards give float32 advantages", '''
        def maxrl_advantages(rewards):
            out = torch.zeros(rewards.shape)
            p = rewards.mean(1, keepdim=True)
            ok = (p > 0).squeeze(1)
            out[ok] = ((rewards[ok] - p[ok]) / p[ok]).float()
            return out
    '''),
    _w("5-in-place", S5, "5 subtracts the mean from the caller's rewards in place", '''
        def maxrl_advantages(rewards):
            p = rewards.mean(1, keepdim=True)
            rewards -= p
            return torch.where(p > 0, rewards / torch.where(p > 0, p, torch.ones_like(p)), torch.zeros_like(rewards))
    '''),
    _w("5-eps", S5, "5 divides by p_hat + 1e-6 instead of treating p_hat = 0 as its own case", '''
        def maxrl_advantages(rewards):
            p = rewards.mean(1, keepdim=True)
            return (rewards - p) / (p + 1e-6)
    '''),
    _w("5-squeeze", S5, "5 squeeze(): one prompt (P = 1) loses its axis", '''
        def maxrl_advantages(rewards):
            p = rewards.mean(1, keepdim=True)
            safe = torch.where(p > 0, p, torch.ones_like(p))
            return torch.where(p > 0, (rewards - p) / safe, torch.zeros_like(rewards)).squeeze()
    '''),
    _w("5-binary", S5, "5 success rate as the share of rewards > 0 (right for 0/1 rewards only)", '''
        def maxrl_advantages(rewards):
            p = (rewards > 0).to(rewards.dtype).mean(1, keepdim=True)
            safe = torch.where(p > 0, p, torch.ones_like(p))
            return torch.where(p > 0, (rewards - rewards.mean(1, keepdim=True)) / safe, torch.zeros_like(rewards))
    '''),
]

RIGHT = [
    Entry("right-ho-a", NB, "hold-out: correct in other ways (no_grad + clone, masked_select, kl_div with the "
          "right arguments, a product of k factors, nan_to_num on a clean division)", [
        solve(S1, '''
            def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
                diff = teacher_logprobs.detach() - student_logprobs.detach()
                return diff.masked_fill(mask.logical_not(), 0.0)
        '''),
        solve(S2, '''
            def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
                r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
                return -(r.masked_select(mask) * student_logprobs.masked_select(mask)).mean()
        '''),
        solve(S3, '''
            def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
                lp = student_logits.log_softmax(-1)
                lq = teacher_logits.log_softmax(-1)
                per_pos = torch.nn.functional.kl_div(lq, lp, reduction="none", log_target=True).sum(-1)
                return per_pos.masked_select(mask).mean()
        '''),
        solve(S4, '''
            def pass_at_k(n, c, k):
                if n - c < k:
                    return 1.0
                prod = 1.0
                for i in range(k):
                    prod *= (n - c - i) / (n - i)
                return 1.0 - prod
        '''),
        solve(S5, '''
            def maxrl_advantages(rewards):
                p = rewards.mean(dim=-1, keepdim=True)
                adv = (rewards - p) / torch.where(p == 0, torch.ones_like(p), p)
                return torch.where(p == 0, torch.zeros_like(adv), adv)
        '''),
    ]),
    Entry("right-ho-b", NB, "hold-out: correct in yet other ways (loops, Fraction-free exact integers, "
          "a loop over the real positions)", [
        solve(S3, '''
            def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
                total = student_logits.new_zeros(())
                count = 0
                for b, r in mask.nonzero().tolist():
                    lp = torch.log_softmax(student_logits[b, r], -1)
                    lq = torch.log_softmax(teacher_logits[b, r], -1)
                    total = total + (lp.exp() * (lp - lq)).sum()
                    count += 1
                return total / max(count, 1)
        '''),
        solve(S4, '''
            def pass_at_k(n, c, k):
                if c == 0:
                    return 0.0
                return float(1 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))
        '''),
        solve(S5, '''
            def maxrl_advantages(rewards):
                rows = []
                for row in rewards:
                    p = row.mean()
                    rows.append(row / p - 1 if p > 0 else torch.zeros_like(row))
                return torch.stack(rows)
        '''),
    ]),
]

HOLDOUT = WRONG + RIGHT
