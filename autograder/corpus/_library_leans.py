"""Submissions that lean on the course library: correct answers whose graded functions call a library
function doing the same task, written in the ways a student would hide it.

Not an assignment spec of its own (the leading "_" keeps `corpus.available` from reading it as
one): LEANS[assignment] are `Entry`s to add to that assignment's ENTRIES once the grader calls the
answer-key check (autograder/review/answer_key.py), e.g. in autograder/corpus/lab11.py:

    from autograder.corpus._library_leans import LEANS
    ENTRIES += LEANS["lab11"]

Every entry is `review=True`: the grader must flag the notebook for review (with the reasons, see
NOTES). Each answer passes the notebook's tests, hidden ones included, so the flag is the only thing
that tells it apart from an honest one (autograder/tests/test_answer_key.py checks both, and that
the answer-key check finds each entry's NOTES and nothing in the rest of the corpus).
"""

from autograder.corpus import Entry, insert, solve

L11, L19, L21, HW4 = "llm_as_policy", "failure_modes", "tasks", "llm_rl"

LEANS = {
    "lab11": [
        Entry("lean-import", L11, "1a calls llmrl.sampling.gather_logprobs (from ... import)", [
            solve("task1a_response_logprobs", '''
                from llmrl.sampling import gather_logprobs

                def response_logprobs(logits, tokens, prompt_len):
                    return gather_logprobs(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:])
            ''')], review=True),
        Entry("lean-module-alias", L11, "4 returns llmrl.toylm's tilted_optimum and kl_objective (import ... as)", [
            solve("task4_tilted_optimum", '''
                import llmrl.toylm as tl

                def tilted_optimum(ref_probs, rewards, beta):
                    return tl.tilted_optimum(ref_probs, rewards, beta)


                def kl_objective(probs, ref_probs, rewards, beta):
                    return tl.kl_objective(probs, ref_probs, rewards, beta)
            ''')], review=True),
        Entry("lean-partial", L11, "3 is functools.partial of lab11.reference_kl_estimators (the module the notebook imports)", [
            solve("task3_kl_estimators", '''
                import functools

                kl_estimators = functools.partial(lab11.reference_kl_estimators)
            ''')], review=True),
        Entry("lean-getattr", L11, "2 checks the temperature, then getattr(sampling, 'sample_' + 'token')", [
            solve("task2_sample_with_temperature", '''
                from llmrl import sampling as _s

                def sample_with_temperature(logits, temperature, generator=None):
                    if temperature < 0:
                        raise ValueError("temperature must be >= 0")
                    return getattr(_s, "sample_" + "token")(logits, temperature, generator)
            ''')], review=True),
        Entry("lean-helper-cell", L11, "5 gets V from a lambda defined in an extra cell over toylm.soft_values", [
            insert('''
                _values_of = lambda second, rewards, beta: toylm.soft_values(second, rewards, beta)
            ''', after="start"),
            solve("task5_token_level_optimum", '''
                def token_level_optimum(first_probs, second_probs, rewards, beta):
                    values = _values_of(second_probs, rewards, beta)
                    with np.errstate(divide="ignore"):
                        logs = np.log(np.asarray(second_probs, dtype=float))
                    pi_second = np.exp(logs + (np.asarray(rewards, dtype=float) - values[:, None]) / beta)
                    return tilted_optimum(first_probs, values, beta), pi_second, values
            ''')], review=True),
        Entry("lean-star", L11, "1b calls reference_sequence_logprob after `from llmrl.labs.lab11 import *`", [
            solve("task1b_sequence_logprob", '''
                from llmrl.labs.lab11 import *

                def sequence_logprob(token_logprobs, mask):
                    return reference_sequence_logprob(token_logprobs, mask)
            ''')], review=True),
    ],
    "lab19": [
        Entry("lean-import", L19, "3 returns llmrl.losses.clipped_surrogate's loss (from ... import ... as)", [
            solve("task3_clipped_pg_loss", '''
                from llmrl.losses import clipped_surrogate as _surrogate

                def clipped_pg_loss(batch):
                    loss, _ = _surrogate(batch.logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                                         batch.eps_low, batch.eps_high)
                    return loss
            ''')], review=True),
        Entry("lean-overopt", L19, "1a-1c call llmrl.overopt (the module the notebook imports)", [
            solve("task1a_bon_kl", '''
                def bon_kl(n):
                    return overopt.bon_kl(n)
            '''),
            solve("task1b_best_of_n_stats", '''
                def best_of_n_stats(proxy, gold, n):
                    return overopt.best_of_n_stats(proxy, gold, n)
            '''),
            solve("task1c_fit_gao_bon", '''
                def fit_gao_bon(d, gold_gain):
                    return overopt.fit_gao_bon(d, gold_gain)
            ''')], review=True),
        Entry("lean-vars", L19, "4 reads token_entropy out of vars(llmrl.evaluation) and keeps the gradient by hand", [
            solve("task4_token_entropy", '''
                import llmrl.evaluation

                def token_entropy(logits, mask):
                    value = vars(llmrl.evaluation)["token_entropy"](logits, mask)
                    logp = torch.log_softmax(logits, dim=-1)
                    ent = -(logp.exp() * logp).sum(-1)[mask].mean()
                    return ent - ent.detach() + value    # the library's number, a gradient that flows
            ''')], review=True),
    ],
    "lab21": [
        Entry("lean-import", L21, "4 calls llmrl.evaluation.pass_at_k (import of the package)", [
            solve("task4_pass_at_k", '''
                import llmrl.evaluation

                def pass_at_k(n, c, k):
                    return float(llmrl.evaluation.pass_at_k(n, c, k))
            ''')], review=True),
        Entry("lean-importlib", L21, "5 imports llmrl.advantages with importlib and asks for kind='maxrl'", [
            solve("task5_maxrl_advantages", '''
                import importlib

                def maxrl_advantages(rewards):
                    adv = importlib.import_module("llmrl.advantages")
                    return adv.group_advantages(rewards, rewards.shape[1], kind="maxrl")
            ''')], review=True),
        Entry("lean-class", L21, "3 is an object whose __call__ runs llmrl.losses.full_vocab_kl", [
            solve("task3_full_vocab_reverse_kl", '''
                from llmrl import losses as _L

                class _ReverseKL:
                    def __call__(self, student_logits, teacher_logits, mask):
                        kl = _L.full_vocab_kl(student_logits, teacher_logits)
                        kl = torch.where(mask, kl, torch.zeros_like(kl))
                        return kl.sum() / mask.sum().clamp(min=1)

                full_vocab_reverse_kl = _ReverseKL()
            ''')], review=True),
    ],
    "hw4": [
        Entry("lean-default-arg", HW4, "1 takes llmrl.sampling.gather_logprobs as a default argument", [
            solve("task1_per_token_logprobs", '''
                import llmrl.sampling

                def compute_per_token_logprobs(logits, input_ids, _gather=llmrl.sampling.gather_logprobs):
                    return _gather(logits[:, :-1].float(), input_ids[:, 1:])
            ''')], review=True),
        Entry("lean-getattr", HW4, "4 hands the split to llmrl.rl.step.minibatches (getattr with a built name)", [
            solve("task4_iter_minibatches", '''
                import llmrl.rl.step as _loop

                def iter_minibatches(batch, minibatch_size, generator=None):
                    sizes = {k: v.shape[0] for k, v in batch.items()}
                    if len(set(sizes.values())) != 1:
                        raise ValueError(f"fields with different row counts: {sizes}")
                    yield from getattr(_loop, "mini" + "batches")(batch, minibatch_size, generator)
            ''')], review=True),
        Entry("lean-exec", HW4, "5 binds llmrl.advantages.group_advantages through exec of a constant string", [
            solve("task5_group_advantages", '''
                exec("from llmrl.advantages import group_advantages as _ga")

                def compute_group_advantages(rewards, group_size, eps=1e-6):
                    if rewards.ndim != 1 or rewards.shape[0] % group_size:
                        raise ValueError(f"rewards must be [B] with B a multiple of {group_size}")
                    if group_size == 1:
                        return torch.zeros_like(rewards, dtype=torch.float32)
                    return _ga(rewards.double(), group_size, kind="std", eps=eps).float()
            ''')], review=True),
        Entry("lean-reference", HW4, "8 asks llmrl.hw4.impl.load_impl('reference') for the instructor's grpo_loss "
              "(the grading sandbox hides the source notebook, so it also fails there)", [
            solve("task8_grpo_loss", '''
                from llmrl.hw4 import impl as _impl

                def grpo_loss(logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef):
                    return _impl.load_impl("reference").grpo_loss(
                        logprobs, old_logprobs, ref_logprobs, mask, advantages, clip_eps, kl_coef)
            ''')], review=True),
    ],
}

# What the answer-key check must say for each entry: the library functions its notes name, where the
# library defines them (an entry imports the old path llmrl.sampling: the note names llmrl.lm.sampling).
NOTES = {
    ("lab11", "lean-import"): ("task1a_response_logprobs", "llmrl.lm.sampling.gather_logprobs"),
    ("lab11", "lean-module-alias"): ("task4_tilted_optimum", "llmrl.lm.toylm.tilted_optimum", "llmrl.lm.toylm.kl_objective"),
    ("lab11", "lean-partial"): ("task3_kl_estimators", "llmrl.labs.lab11.reference_kl_estimators"),
    ("lab11", "lean-getattr"): ("task2_sample_with_temperature", "llmrl.lm.sampling.sample_token"),
    ("lab11", "lean-helper-cell"): ("task5_token_level_optimum", "llmrl.lm.toylm.soft_values"),
    ("lab11", "lean-star"): ("task1b_sequence_logprob", "llmrl.labs.lab11.reference_sequence_logprob"),
    ("lab19", "lean-import"): ("task3_clipped_pg_loss", "llmrl.rl.losses.clipped_surrogate"),
    ("lab19", "lean-overopt"): ("task1a_bon_kl", "llmrl.labs.overopt.bon_kl", "task1b_best_of_n_stats",
                                "llmrl.labs.overopt.best_of_n_stats", "task1c_fit_gao_bon", "llmrl.labs.overopt.fit_gao_bon"),
    ("lab19", "lean-vars"): ("task4_token_entropy", "llmrl.rl.evaluation.token_entropy"),
    ("lab21", "lean-import"): ("task4_pass_at_k", "llmrl.rl.evaluation.pass_at_k"),
    ("lab21", "lean-importlib"): ("task5_maxrl_advantages", "llmrl.rl.advantages.group_advantages"),
    ("lab21", "lean-class"): ("task3_full_vocab_reverse_kl", "llmrl.rl.losses.full_vocab_kl"),
    ("hw4", "lean-default-arg"): ("task1_per_token_logprobs", "llmrl.lm.sampling.gather_logprobs"),
    ("hw4", "lean-getattr"): ("task4_iter_minibatches", "llmrl.rl.step.minibatches"),
    ("hw4", "lean-exec"): ("task5_group_advantages", "llmrl.rl.advantages.group_advantages"),
    ("hw4", "lean-reference"): ("task8_grpo_loss", "llmrl.hw4.impl.load_impl"),
}
# Entries whose answer is right only where the reference solutions can be read (not in the sandbox).
NEEDS_REFERENCE = {("hw4", "lean-reference")}
