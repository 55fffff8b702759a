"""lab21 (tasks, projects): realistic answers, two wrong ones per task; write-ups graded by hand.

Task 2's loss calls the student's Task 1 rewards, so a wrong Task 1 also loses Task 2 (as it
should: the loss is wrong too); the specs say so. Each wrong answer loses the test cells of its task
that grade the concern it gets wrong (`tests(task, *concerns)` names them).
"""

from autograder.corpus import Entry, solve, standard_entries, tests

TASKS, PROJECTS = "tasks", "projects"
S1, S2, S3, S4, S5 = ("task1_reverse_kl_rewards", "task2_opd_pg_loss", "task3_full_vocab_reverse_kl",
                      "task4_pass_at_k", "task5_maxrl_advantages")

REWRITTEN = [
    solve(S1, '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            with torch.no_grad():
                r = teacher_logprobs - student_logprobs
            return r.masked_fill(~mask, 0.0)
    '''),
    solve(S2, '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            terms = (r * student_logprobs.masked_fill(~mask, 0.0))[mask]
            return -terms.sum() / max(int(mask.sum()), 1)
    '''),
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.nn.functional.log_softmax(student_logits, dim=-1)
            lq = torch.nn.functional.log_softmax(teacher_logits, dim=-1)
            # kl_div(input, target) = target * (log target - input): target = the student
            kl = torch.nn.functional.kl_div(lq, lp, log_target=True, reduction="none").sum(-1)
            return kl[mask].mean()
    '''),
    solve(S4, '''
        def pass_at_k(n, c, k):
            return 1.0 - math.comb(n - c, k) / math.comb(n, k)   # exact integers, then one division
    '''),
    solve(S5, '''
        def maxrl_advantages(rewards):
            out = torch.zeros_like(rewards)
            for i, row in enumerate(rewards):
                p = row.mean()
                if p > 0:
                    out[i] = row / p - 1
            return out
    '''),
]

WRONG_A = [
    solve(S1, '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = (student_logprobs - teacher_logprobs).detach()     # the ratio upside down
            return torch.where(mask, r, torch.zeros_like(r))
    '''),
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, -1)
            lq = torch.log_softmax(teacher_logits, -1)
            kl = (lq.exp() * (lq - lp)).sum(-1)                    # forward KL(teacher || student)
            return kl[mask].mean()
    '''),
    solve(S4, '''
        def pass_at_k(n, c, k):
            return 1.0 - (1.0 - c / n) ** k                        # the biased plug-in estimate
    '''),
]
WRONG_B = [
    solve(S1, '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            return ((teacher_logprobs - student_logprobs) * mask).detach()   # -inf * 0 = nan
    '''),
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            p = torch.softmax(student_logits, -1)
            q = torch.softmax(teacher_logits, -1)
            kl = (p * (p.log() - q.log())).sum(-1)                 # log of a softmax: inf for confident logits
            return kl[mask].mean()
    '''),
    solve(S4, '''
        def pass_at_k(n, c, k):
            return min(1.0, k * c / n)                             # adds up probabilities
    '''),
]
WRONG_C = [
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, dim=-1)
            lq = torch.log_softmax(teacher_logits, dim=-1)
            kl = torch.where(mask, (lp.exp() * (lp - lq)).sum(-1), torch.zeros(mask.shape))
            return (kl.sum() / mask.sum().clamp(min=1)).float()    # float32 whatever the logits' dtype
    '''),
    solve(S2, '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return -(r * lp).mean()                                # padding counted in the mean
    '''),
    solve(S5, '''
        def maxrl_advantages(rewards):
            mean = rewards.mean(1, keepdim=True)
            return (rewards - mean) / (rewards.std(1, keepdim=True) + 1e-6)   # GRPO's std, not MaxRL
    '''),
]
WRONG_D = [
    solve(S2, '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = reverse_kl_rewards(student_logprobs, teacher_logprobs, mask)
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return -(r * lp).sum().float()                         # a sum: scales with the batch; float32 always
    '''),
    solve(S5, '''
        def maxrl_advantages(rewards):
            p = rewards.mean(1, keepdim=True)
            return (rewards - p) / p                               # 0 / 0 for a group with no success
    '''),
]

# the traps the first corpus lacked
WRONG_E = [
    solve(S2, '''
        def opd_pg_loss(student_logprobs, teacher_logprobs, mask):
            r = torch.where(mask, teacher_logprobs - student_logprobs, torch.zeros_like(student_logprobs))   # not detached
            lp = torch.where(mask, student_logprobs, torch.zeros_like(student_logprobs))
            return -(r * lp).sum() / mask.sum().clamp(min=1)
    '''),
    solve(S4, '''
        def pass_at_k(n, c, k):
            if n - c < k:
                return 1.0
            comb = lambda a, b: float(math.factorial(a)) / (float(math.factorial(b)) * float(math.factorial(a - b)))
            return 1.0 - comb(n - c, k) / comb(n, k)              # 171! does not fit in a float
    '''),
    solve(S5, '''
        def maxrl_advantages(rewards):
            p = rewards.mean(dim=0, keepdim=True)                  # the mean over prompts, not within each group
            return torch.where(p > 0, (rewards - p) / p.clamp(min=1e-12), torch.zeros_like(rewards))
    '''),
]
WRONG_F = [
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            lp = torch.log_softmax(student_logits, -1)
            lq = torch.log_softmax(teacher_logits, -1)
            return (lp.exp() * (lp - lq)).sum(-1).mean()              # padding positions counted too
    '''),
    solve(S1, '''
        def reverse_kl_rewards(student_logprobs, teacher_logprobs, mask):
            r = teacher_logprobs - student_logprobs                 # carries the student's gradient
            return torch.where(mask, r, torch.zeros_like(r))
    '''),
]
RIGHT_B = [
    solve(S4, '''
        def pass_at_k(n, c, k):
            if n - c < k:
                return 1.0
            # log C(n - c, k) - log C(n, k) with lgamma: no overflow at any n
            log_ratio = (math.lgamma(n - c + 1) - math.lgamma(n - c - k + 1)) - (math.lgamma(n + 1) - math.lgamma(n - k + 1))
            return 1.0 - math.exp(log_ratio)
    '''),
    solve(S5, '''
        def maxrl_advantages(rewards):
            p = rewards.mean(1, keepdim=True)
            return torch.nan_to_num((rewards - p) / p, nan=0.0)        # 0 / 0 -> 0 for a group with no success
    '''),
    solve(S3, '''
        def full_vocab_reverse_kl(student_logits, teacher_logits, mask):
            s, t = student_logits[mask].double(), teacher_logits[mask].double()   # real positions only
            ls = s - torch.logsumexp(s, -1, keepdim=True)
            lt = t - torch.logsumexp(t, -1, keepdim=True)
            return (ls.exp() * (ls - lt)).sum(-1).mean().to(student_logits.dtype)
    '''),
]

ENTRIES = standard_entries(TASKS) + [
    Entry("rewritten", TASKS, "every task correct, written differently (no_grad, kl_div, math.comb, a loop)",
          REWRITTEN),
    Entry("wrong-a", TASKS, "1 reward upside down (2 uses it), 3 forward KL, 4 plug-in pass@k",
          WRONG_A, lose=tests(S1, "values", "edge") + tests(S2, "values", "grad") + tests(S3, "values", "grad") + tests(S4, "values", "edge")),
    Entry("wrong-b", TASKS, "1 multiplies by the mask (2 uses it), 3 log of softmax, 4 k c / n",
          WRONG_B, lose=tests(S1, "edge") + tests(S2, "grad") + tests(S3, "edge") + tests(S4, "values", "edge")),
    Entry("wrong-c", TASKS, "2 mean over padding too, 3 returns float32 whatever the logits' dtype, "
          "5 GRPO's std normalisation", WRONG_C, lose=tests(S2, "values", "grad") + tests(S3, "contract") + tests(S5, "values", "edge")),
    Entry("wrong-d", TASKS, "2 sum instead of token mean, in float32 whatever the input, 5 divides 0 by 0", WRONG_D, lose=tests(S2, "values", "grad", "contract") + tests(S5, "values", "edge")),
    Entry("wrong-e", TASKS, "2 a reward that carries gradient, 4 float factorials (overflow past 170), "
          "5 the mean over prompts instead of within each group", WRONG_E, lose=tests(S2, "grad") + tests(S4, "edge") + tests(S5, "values", "edge")),
    Entry("wrong-f", TASKS, "3 the mean over padding too, 1 the reward not detached (2 uses it)",
          WRONG_F, lose=tests(S1, "contract") + tests(S2, "grad") + tests(S3, "values", "grad")),
    Entry("right-b", TASKS, "tasks 3, 4, 5 correct in yet another way (logsumexp in float64, lgamma, nan_to_num)",
          RIGHT_B),
] + standard_entries(PROJECTS) + [
    Entry("one-writeup", PROJECTS, "only project 1's write-up answered: it waits for a person, the rest score 0",
          [solve("writeup_project1", "**Hypothesis.** My own words about clip-higher.")], base="release",
          expect={"writeup_project1": None}),
]
