"""lab11 (llm_as_policy): realistic answers and the hostile or broken submissions.

Wrong answers are the handout's common mistakes (and the ones the hidden tests were written
against); each loses the test cells of its own task that grade the concern it gets wrong (a task's
tests are split by concern: values, contract, edge, grad, rng; `tests(task, *concerns)` names
them). Where a later task calls an earlier one (Task 5 builds on `tilted_optimum`), the spec says
so and expects both to lose.
"""

from textwrap import dedent

from autograder.corpus import ROOT, Entry, delete, insert, set_points, solve, standard_entries, strip_metadata, test_source, tests

NB = "llm_as_policy"
S1A, S1B, S2, S3, S4, S5 = ("task1a_response_logprobs", "task1b_sequence_logprob",
                            "task2_sample_with_temperature", "task3_kl_estimators",
                            "task4_tilted_optimum", "task5_token_level_optimum")
# each task's first test cell (its values), for the entries that tamper with test cells
T1A, T1B, T2, T3, T4, T5 = (tests(s, "values")[0] for s in (S1A, S1B, S2, S3, S4, S5))

# ----------------------------------------------------------------------------- correct, written differently
REWRITTEN = [
    solve(S1A, '''
        def response_logprobs(logits, tokens, prompt_len):
            # one column at a time: the logits at t - 1 score the token at t
            cols = []
            for t in range(prompt_len, tokens.shape[1]):
                logp = torch.log_softmax(logits[:, t - 1, :], dim=-1)
                cols.append(logp.gather(1, tokens[:, t:t + 1]))
            return torch.cat(cols, dim=1)
    '''),
    solve(S1B, '''
        def sequence_logprob(token_logprobs, mask):
            return token_logprobs.masked_fill(~mask, 0.0).sum(dim=1)
    '''),
    solve(S2, '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError("temperature must not be negative")
            if temperature == 0:
                return torch.max(logits, dim=-1).indices
            # inverse-CDF sampling with uniforms from the generator
            probs = torch.softmax(logits.double() / temperature, dim=-1)
            u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64)
            idx = (probs.cumsum(dim=-1) < u).sum(dim=-1)
            return idx.clamp(max=probs.shape[-1] - 1).long()
    '''),
    solve(S3, '''
        def kl_estimators(logp, logp_ref):
            d = logp_ref - logp          # log(pi_ref / pi) = -l
            return -d, d.pow(2) / 2, torch.expm1(d) - d
    '''),
    solve(S4, '''
        def tilted_optimum(ref_probs, rewards, beta):
            with np.errstate(divide="ignore"):
                z = np.log(ref_probs) + np.asarray(rewards) / beta
            return np.exp(z - np.logaddexp.reduce(z))

        def kl_objective(probs, ref_probs, rewards, beta):
            p, q = np.asarray(probs, float), np.asarray(ref_probs, float)
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(p > 0, p * np.log(p / q), 0.0)
            return float(np.dot(p, rewards) - beta * terms.sum())
    '''),
    solve(S5, '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            A = len(first_probs)
            values = np.empty(A)
            pi_second = np.zeros_like(np.asarray(second_probs, dtype=float))
            for i in range(A):
                with np.errstate(divide="ignore"):
                    z = np.log(second_probs[i]) + rewards[i] / beta
                values[i] = beta * np.logaddexp.reduce(z)
                pi_second[i] = np.exp(z - values[i] / beta)
            return tilted_optimum(first_probs, values, beta), pi_second, values
    '''),
]

# ----------------------------------------------------------------------------- wrong answers (two per task)
# A correct tilted_optimum, for the wrong answers whose mistake is in kl_objective (task 4's other half).
TILTED_LOG_SPACE = '''
def tilted_optimum(ref_probs, rewards, beta):
    with np.errstate(divide="ignore"):
        z = np.log(ref_probs) + rewards / beta
    w = np.exp(z - z.max())
    return w / w.sum()
'''

NO_SHIFT = solve(S1A, '''
    def response_logprobs(logits, tokens, prompt_len):
        logp = torch.log_softmax(logits[:, prompt_len:], dim=-1)   # scores each token with its own column
        return logp.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
''')
RAW_LOGITS = solve(S1A, '''
    def response_logprobs(logits, tokens, prompt_len):
        picked = logits[:, prompt_len - 1:-1]                       # forgot log_softmax
        return picked.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
''')
TIMES_MASK = solve(S1B, '''
    def sequence_logprob(token_logprobs, mask):
        return (token_logprobs * mask).sum(dim=-1)                  # 0 * -inf = nan
''')
MEAN = solve(S1B, '''
    def sequence_logprob(token_logprobs, mask):
        return torch.where(mask, token_logprobs, 0.0).mean(dim=-1)  # a mean, not the sum
''')
MULTIPLY_T = solve(S2, '''
    def sample_with_temperature(logits, temperature, generator=None):
        if temperature < 0:
            raise ValueError("negative temperature")
        if temperature == 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits * temperature, dim=-1)         # multiplies instead of dividing
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''')
NO_GENERATOR = solve(S2, '''
    def sample_with_temperature(logits, temperature, generator=None):
        if temperature < 0:
            raise ValueError("negative temperature")
        if temperature == 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits / temperature, dim=-1)
        return torch.multinomial(probs, 1).squeeze(-1)              # ignores the generator
''')
K3_SIGN = solve(S3, '''
    def kl_estimators(logp, logp_ref):
        l = logp - logp_ref
        return l, 0.5 * l ** 2, torch.exp(l) - 1 - l                # ratio the wrong way round
''')
K2_NO_HALF = solve(S3, '''
    def kl_estimators(logp, logp_ref):
        l = logp - logp_ref
        return l, l ** 2, torch.exp(-l) - 1 + l                     # k2 without the 1/2
''')
DIRECT_EXP = solve(S4, '''
    def tilted_optimum(ref_probs, rewards, beta):
        w = ref_probs * np.exp(rewards / beta)                      # overflows for small beta
        return w / w.sum()

    def kl_objective(probs, ref_probs, rewards, beta):
        probs = np.asarray(probs, float)
        s = probs > 0
        return float(probs @ rewards - beta * np.sum(probs[s] * np.log(probs[s] / np.asarray(ref_probs)[s])))
''')
NO_ZERO_LOG_ZERO = solve(S4, TILTED_LOG_SPACE + dedent('''
    def kl_objective(probs, ref_probs, rewards, beta):
        probs = np.asarray(probs, float)
        return float(probs @ rewards - beta * np.sum(probs * np.log(probs / ref_probs)))   # 0 log 0 = nan
'''))
VALUES_NO_BETA = solve(S5, '''
    def token_level_optimum(first_probs, second_probs, rewards, beta):
        with np.errstate(divide="ignore"):
            scaled = np.log(second_probs) + rewards / beta
        values = np.logaddexp.reduce(scaled, axis=1)                # forgot the factor beta
        pi_second = np.exp(scaled - values[:, None])
        return tilted_optimum(first_probs, values, beta), pi_second, values
''')
VALUES_NAIVE_EXP = solve(S5, '''
    def token_level_optimum(first_probs, second_probs, rewards, beta):
        values = beta * np.log((second_probs * np.exp(rewards / beta)).sum(axis=1))   # overflows
        pi_second = second_probs * np.exp((rewards - values[:, None]) / beta)
        return tilted_optimum(first_probs, values, beta), pi_second, values
''')

# the traps the first corpus lacked: each loses its own task
LOG_OF_SOFTMAX = solve(S1A, '''
    def response_logprobs(logits, tokens, prompt_len):
        probs = torch.softmax(logits[:, prompt_len - 1:-1], dim=-1)  # underflows to 0 for unlikely tokens
        return probs.gather(-1, tokens[:, prompt_len:].unsqueeze(-1)).squeeze(-1).log()
''')
IGNORES_MASK = solve(S1B, '''
    def sequence_logprob(token_logprobs, mask):
        return token_logprobs.sum(dim=-1)                           # sums the padding too
''')
T0_DIVIDES = solve(S2, '''
    def sample_with_temperature(logits, temperature, generator=None):
        if temperature < 0:
            raise ValueError("negative temperature")
        probs = torch.softmax(logits / temperature, dim=-1)         # T = 0: division by zero, nan
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''')
KL_REVERSED = solve(S4, TILTED_LOG_SPACE + dedent('''
    def kl_objective(probs, ref_probs, rewards, beta):
        probs, ref_probs = np.asarray(probs, float), np.asarray(ref_probs, float)
        s = ref_probs > 0
        kl = np.sum(ref_probs[s] * np.log(ref_probs[s] / np.maximum(probs[s], 1e-300)))   # KL(ref || pi)
        return float(probs @ rewards - beta * kl)
'''))
GREEDY_VALUES = solve(S5, '''
    def token_level_optimum(first_probs, second_probs, rewards, beta):
        with np.errstate(divide="ignore"):
            scaled = np.log(second_probs) + rewards / beta
        values = beta * np.logaddexp.reduce(scaled, axis=1)
        pi_second = np.exp(scaled - values[:, None] / beta)
        return tilted_optimum(first_probs, rewards.max(axis=1), beta), pi_second, values   # best reward, not V
''')

# correct, written another way again (each new test must let these through)
RIGHT_B = [
    solve(S1A, '''
        def response_logprobs(logits, tokens, prompt_len):
            z = logits[:, prompt_len - 1:-1].double()
            logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
            return torch.take_along_dim(logp, tokens[:, prompt_len:, None], dim=-1)[..., 0].to(logits.dtype)
    '''),
    solve(S1B, '''
        def sequence_logprob(token_logprobs, mask):
            rows = torch.arange(mask.shape[0]).unsqueeze(1).expand_as(mask)[mask]
            return torch.zeros(mask.shape[0], dtype=token_logprobs.dtype).index_add(0, rows, token_logprobs[mask])
    '''),
    solve(S2, '''
        def sample_with_temperature(logits, temperature, generator=None):
            if temperature < 0:
                raise ValueError(f"temperature {temperature} < 0")
            if temperature == 0:
                return torch.argmax(logits, dim=-1)
            probs = torch.softmax(logits.double() / temperature, dim=-1)
            return torch.multinomial(probs, 1, generator=generator)[:, 0]
    '''),
    solve(S4, '''
        def tilted_optimum(ref_probs, rewards, beta):
            out = np.zeros(len(ref_probs))
            keep = np.asarray(ref_probs) > 0
            z = np.log(np.asarray(ref_probs)[keep]) + np.asarray(rewards)[keep] / beta
            e = np.exp(z - z.max())
            out[keep] = e / e.sum()
            return out

        def kl_objective(probs, ref_probs, rewards, beta):
            total = 0.0
            for p, q, r in zip(probs, ref_probs, rewards):
                if p > 0:
                    total += p * r - beta * p * (math.log(p) - math.log(q))
            return float(total)
    '''),
]

# ----------------------------------------------------------------------------- hostile code
ATTACK = r'''
import os, pathlib, socket, sqlite3
_root = pathlib.Path(%(root)r)
_here = pathlib.Path.cwd()
_scratch = _here.parents[2] if len(_here.parents) > 2 else _here
def _try(what, fn):
    try:
        out = fn()
    except Exception as e:
        print("BLOCKED", what, type(e).__name__)
    else:
        print("LEAK", what, str(out)[:80])
# read the course's hidden files and other students' work
_try("source notebook", lambda: [p for p in (_root / "source").rglob("*.ipynb")][0].read_text()[:10])
_try("scratch source", lambda: [p for p in (_scratch / "source").rglob("*.ipynb")][0].read_text()[:10])
_try("jupytext sources", lambda: (_root / "notebooks" / "lab11" / "llm_as_policy.py").read_text()[:10])
_try("git history", lambda: (_root / ".git" / "HEAD").read_text())
_try("scratch gradebook", lambda: sqlite3.connect(f"file:{_scratch / 'gradebook.db'}?mode=ro", uri=True).execute("select * from grade_cell").fetchall()[0])
_try("course gradebook", lambda: (_root / "gradebook.db").read_bytes()[:16] or 1 / 0)
_try("other students", lambda: [p for p in pathlib.Path("/tmp").glob("llmrl-grade-*/submitted/*") if p.name != _here.parent.name][0])
_try("other students in the course", lambda: next((_root / "submitted").iterdir()))
# write where it must not
_try("write course gradebook", lambda: open(_root / "gradebook.db", "ab").write(b"x"))
_try("write scratch gradebook", lambda: open(_scratch / "gradebook.db", "ab").write(b"x"))
_try("write other folder", lambda: (pathlib.Path("/tmp") / "llmrl-planted.txt").write_text("x"))
_try("write the library", lambda: open(_root / "lib" / "llmrl" / "planted.py", "w").write("x"))
_try("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=3))
_try("own folder", lambda: (_here / "scratch.txt").write_text("mine") and "BLOCKED-own-folder-is-fine")
'''

FREE_CELL_ABUSE = [
    insert("while True:\n    pass", after="start"),  # stopped by the per-cell timeout
    insert('''
        def _hog():
            chunks = []
            while True:
                chunks.append(np.ones(2 ** 21))   # 16 MB at a time until the memory limit says no: the
                #                                   kernel is left with less than 16 MB of address space
        _hog()
    ''', after="start"),
    insert("for _ in range(300):\n    print('x' * 100_000)", after="start"),  # 30 MB of output
]

ENTRIES = standard_entries(NB) + [
    Entry("rewritten", NB, "every task correct, written differently (loops, masked_fill, inverse CDF, expm1, logaddexp)",
          REWRITTEN),
    Entry("wrong-a", NB, "1a no shift, 2 multiplies by T, 3 k3 sign", [NO_SHIFT, MULTIPLY_T, K3_SIGN], lose=tests(S1A, "values", "grad") + tests(S2, "values") + tests(S3, "values", "edge", "grad")),
    Entry("wrong-b", NB, "1a forgot log_softmax, 2 ignores the generator, 3 k2 without 1/2",
          [RAW_LOGITS, NO_GENERATOR, K2_NO_HALF], lose=tests(S1A, "values", "edge", "grad") + tests(S2, "rng") + tests(S3, "values", "grad")),
    Entry("wrong-c", NB, "1b multiplies by the mask, 5 soft values without beta", [TIMES_MASK, VALUES_NO_BETA],
          lose=tests(S1B, "edge", "grad") + tests(S5, "values", "edge")),
    Entry("wrong-d", NB, "1b mean instead of sum, 5 soft values by a plain exp (overflow)", [MEAN, VALUES_NAIVE_EXP],
          lose=tests(S1B, "values", "edge", "grad") + tests(S5, "edge")),
    Entry("wrong-e", NB, "4 kl_objective without 0 log 0 = 0", [NO_ZERO_LOG_ZERO], lose=tests(S4, "edge")),
    Entry("wrong-f", NB, "4 tilted_optimum by a plain exp (overflow); task 5 calls it, so it loses too",
          [DIRECT_EXP], lose=tests(S4, "edge") + tests(S5, "edge")),
    Entry("wrong-g", NB, "1a log of a softmax (underflow), 2 divides by T = 0, 4 KL the wrong way round",
          [LOG_OF_SOFTMAX, T0_DIVIDES, KL_REVERSED], lose=tests(S1A, "edge") + tests(S2, "edge") + tests(S4, "values", "edge")),
    Entry("wrong-h", NB, "1b ignores the mask, 5 tilts the first token by the best reward instead of V",
          [IGNORES_MASK, GREEDY_VALUES], lose=tests(S1B, "values", "edge", "grad") + tests(S5, "values")),
    Entry("right-b", NB, "tasks 1a, 1b, 2, 4 correct in yet another way (logsumexp in float64, index_add, "
          "a loop with math.log)", RIGHT_B),
    # ---- broken and hostile
    Entry("raises", NB, "task 1a raises an exception", [solve(S1A, '''
        def response_logprobs(logits, tokens, prompt_len):
            raise RuntimeError("my code crashes")
    ''')], lose=tests(S1A, "values", "contract", "edge", "grad")),
    Entry("loop-in-task", NB, "task 5 never returns: its test cell hits the per-cell timeout", [solve(S5, '''
        def token_level_optimum(first_probs, second_probs, rewards, beta):
            while True:
                pass
    ''')], lose=tests(S5, "values", "contract", "edge"),
       env={"LLMRL_GRADE_CELL_TIMEOUT": "15"}),
    Entry("free-cell-abuse", NB, "free cells: an infinite loop, a memory hog, 30 MB of output; every task right",
          FREE_CELL_ABUSE, env={"LLMRL_GRADE_CELL_TIMEOUT": "15", "LLMRL_GRADE_MEM_MB": "3072"}, check="small_output"),
    Entry("notebook-timeout", NB, "slow free cells use up the feedback run's time: its later cells do not run; the "
          "grading run, in a fresh kernel, still scores every task",
          [insert("import time\ntime.sleep(10)", after="start") for _ in range(3)],
          env={"LLMRL_GRADE_CELL_TIMEOUT": "15", "LLMRL_GRADE_NOTEBOOK_TIMEOUT": "25"}, check="notebook_timeout"),
    Entry("kernel-dies", NB, "a free cell after task 3 kills the feedback run's kernel; the grading run, in a fresh "
          "kernel, still scores every task", [insert("import os\nos._exit(3)", after=tests(S3, "grad")[0])], check="kernel_died"),
    Entry("tests-tampered", NB, "1b's values test deleted, 2's replaced by pass, 3's stripped of its metadata and "
          "replaced by pass, 1a's claims 100 points; tasks 2 and 3 wrong",
          [delete(T1B), MULTIPLY_T, test_source(T2, "pass"), K3_SIGN, test_source(T3, "pass"), strip_metadata(T3),
           set_points(T1A, 100)], lose=tests(S2, "values") + tests(S3, "values", "edge", "grad")),
    Entry("patch-allclose", NB, "torch.allclose = lambda *a, **k: True in a free cell, task 1a wrong",
          [NO_SHIFT, insert("torch.allclose = lambda *a, **k: True", after="start")], lose=tests(S1A, "values", "grad")),
    Entry("patch-numpy", NB, "np.allclose and np.testing.assert_allclose replaced, task 4 wrong",
          [NO_ZERO_LOG_ZERO, insert("np.allclose = lambda *a, **k: True\n"
                                    "np.testing.assert_allclose = lambda *a, **k: None", after="start")], lose=tests(S4, "edge")),
    Entry("fake-torch", NB, "the name torch rebound to a look-alike whose allclose always agrees, task 3 wrong",
          [K3_SIGN, insert('''
            import types as _types
            _real = torch
            torch = _types.SimpleNamespace(**{k: getattr(_real, k) for k in dir(_real) if not k.startswith("__")})
            torch.allclose = lambda *a, **k: True
          ''', after=S3)], lose=tests(S3, "values", "edge", "grad")),
    Entry("patch-inside-task", NB, "task 3 replaces torch.allclose while the test calls it, and is wrong",
          [solve(S3, '''
            def kl_estimators(logp, logp_ref):
                import torch as _t
                _t.allclose = lambda *a, **k: True
                l = logp - logp_ref
                return l, l ** 2, torch.exp(l) - 1 - l
          ''')], lose=tests(S3, "values", "edge", "grad")),
    Entry("not-json", NB, "a file that is not valid JSON", file_text='{"cells": [{"cell_type": "code", ',
          status="missing"),
    Entry("renamed", NB, "the right notebook under another name", filename="llm_as_policy (1).ipynb"),
    Entry("absent", NB, "a submission folder with no notebook in it", absent=True, status="missing"),
    Entry("attack", NB, "reads hidden tests, the gradebook and other students, writes outside its folder, "
          "opens a socket; every task right", [insert(ATTACK % {"root": str(ROOT)}, after="start")],
          check="no_leak"),
]
