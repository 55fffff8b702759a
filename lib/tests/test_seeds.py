"""Seeds as a dimension: S seeds stepping together give each seed the numbers of a run
of that seed alone; the stacked passes give TinyLM's numbers.

Tolerances. Seed s of a stack is computed by the same batched kernels as a one-seed stack (one
``bmm`` / ``baddbmm`` per layer, every reduction along the same contiguous rows), and on the
machines we checked (AMD EPYC / AVX-512, one thread) the two agree to the last bit over whole runs.
Another CPU's BLAS could split a batched product differently from a single one and move the last
bits (~1e-7 relative), and so does a step in which one seed's completions need fewer columns
than the others' (the scorer packs all seeds alike; it happens when no row of a seed has a token
in the last column that another seed's rows use); continuous metrics then drift by ~1e-6 over a
short run, hence 1e-5 on step-by-step comparisons. A sampled token flips only when two candidates tie to the last bit (about
one token in a million), which would show as a rate off by 1/128 and a diverging run: the long
runs are therefore compared statistically (means over many steps within sampling noise), not
step by step.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from llmrl.addition import EOS, MAX_ANSWER_CHARS, PAD, sample_problems
from llmrl.advantages import group_advantages
from llmrl.sft.checkpoints import load_checkpoint
from llmrl.rewards import make_proxy_reward
from llmrl.runner import run_arms, seeds_together
from llmrl.sampling import response_logits, sample_completions
from llmrl.stacked import TinyLMStack, canonical_rows, log_softmax
from llmrl.tinylm import TinyLM
from llmrl.rl.run import Hooks
from llmrl.rl.step import PolicyOptimizer
from llmrl.rl.config import RLConfig
from llmrl.rl.train import SeedHistories, rl_train

STEP_TOL = 1e-5  # step-by-step, short runs (see the module docstring)


@pytest.fixture(scope="module")
def sft():
    return load_checkpoint("sft", progress=False)


def _perturbed(model, seed):
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return m


def _rollout_tokens(model, n=16, G=8, seed=0):
    prompts = sample_problems(n, generator=seed).prompt_tokens()
    out, _, _ = sample_completions(model, prompts, G, MAX_ANSWER_CHARS, 1.0, torch.Generator().manual_seed(seed),
                                   eos=EOS, pad=PAD, cap_with_eos=True)
    return prompts, torch.cat([prompts.repeat_interleave(G, 0), out], 1)


# ----------------------------------------------------------------------------- the stacked passes

@pytest.mark.parametrize("name", ["sft", "gelu"])  # lab11/lab19's ReLU model, and GELU (lab21's nonlinearity)
def test_stack_scores_what_tinylm_scores(name, request):
    model = request.getfixturevalue(name)
    ref = copy.deepcopy(model)
    stack = TinyLMStack([copy.deepcopy(model)])
    _, tokens = _rollout_tokens(ref)
    with torch.no_grad():
        want = response_logits(ref, tokens, 8)
        got = stack.completion_logits(tokens, 7, 8)[..., :15]
        assert (got - want).abs().max() < 1e-4  # another kernel for the same math: last-bit differences
        rows = stack.row_logits(tokens)[..., :15]
        assert (rows - ref(tokens)).abs().max() < 1e-4
        # fewer columns: the first n_cols are the same numbers (another packing: last bits), the rest zeros
        four = stack.completion_logits(tokens, 7, 8, n_cols=4)
        assert (four[:, :4, :15] - got[:, :4]).abs().max() < 1e-5
        assert float(four[:, 4].abs().max()) == 0.0


def test_stack_samples_what_the_decode_loop_samples(sft):
    ref = copy.deepcopy(sft)
    stack = TinyLMStack([copy.deepcopy(sft)])
    prompts = sample_problems(32, generator=1).prompt_tokens()
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    o1, c1, l1 = sample_completions(ref, prompts, 8, MAX_ANSWER_CHARS, 1.0, g1, eos=EOS, pad=PAD, cap_with_eos=True)
    o2, c2, l2 = stack.sample(prompts, 8, MAX_ANSWER_CHARS, 1.0, [g2], eos=EOS, pad=PAD, cap_with_eos=True)
    # the same random stream drawn the same way: the same tokens (a row may differ only at an exact tie)
    assert (o1 == o2).all(1).float().mean() > 0.99
    assert torch.equal(g1.get_state(), g2.get_state())  # the generator is left where the old loop left it
    same = (o1 == o2).all(1)
    assert (l1[same] - l2[same]).abs().max() < 1e-4
    assert torch.equal(c1[same], c2[same])
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    greedy1, *_ = sample_completions(ref, prompts, 1, MAX_ANSWER_CHARS, 0.0, g1, eos=EOS, pad=PAD, cap_with_eos=True)
    greedy2, *_ = stack.sample(prompts, 1, MAX_ANSWER_CHARS, 0.0, [g2], eos=EOS, pad=PAD, cap_with_eos=True)
    assert (greedy1 == greedy2).all(1).float().mean() > 0.99


@pytest.fixture(scope="module")
def gelu(sft):
    """A TinyLM with GELU in its MLP (lab21's models' nonlinearity), holding the sft weights."""
    m = TinyLM(activation="gelu")
    m.load_state_dict(sft.state_dict())
    return m.eval()


def test_the_stack_runs_the_models_activation(gelu):
    """The GELU stack scores (test_stack_scores_what_tinylm_scores) and samples what the GELU TinyLM
    does, and not what a ReLU model of the same weights would."""
    ref = copy.deepcopy(gelu)
    stack = TinyLMStack([copy.deepcopy(gelu)])
    _, tokens = _rollout_tokens(ref)
    with torch.no_grad():
        want = response_logits(ref, tokens, 8)
        relu = TinyLM()
        relu.load_state_dict(gelu.state_dict())
        other = TinyLMStack([relu]).completion_logits(tokens, 7, 8)[..., :15]
        assert (other - want).abs().max() > 1e-2  # the nonlinearity matters: not the ReLU stack's numbers
    prompts = sample_problems(32, generator=1).prompt_tokens()
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    o1, *_ = sample_completions(ref, prompts, 8, MAX_ANSWER_CHARS, 1.0, g1, eos=EOS, pad=PAD, cap_with_eos=True)
    o2, *_ = stack.sample(prompts, 8, MAX_ANSWER_CHARS, 1.0, [g2], eos=EOS, pad=PAD, cap_with_eos=True)
    assert (o1 == o2).all(1).float().mean() > 0.99
    with pytest.raises(ValueError, match="one configuration"):
        TinyLMStack([copy.deepcopy(gelu), TinyLM()])


def test_each_seed_of_a_batched_gelu_run_is_its_single_run(gelu):
    cfg = RLConfig(steps=3, lr=5e-4, kl_coef=0.05)
    batched = rl_train(gelu, cfg, seeds=[0, 3], progress=False)
    for s, hist in zip((0, 3), batched):
        _compare_step_by_step(rl_train(copy.deepcopy(gelu), cfg, seed=s, progress=False), hist, f"gelu seed {s}")


def test_seed_s_of_a_stack_is_a_one_seed_stack(sft):
    models = [_perturbed(sft, s) for s in range(3)]
    singles = [TinyLMStack([copy.deepcopy(m)]) for m in models]
    stack = TinyLMStack(models)
    prompts = torch.cat([sample_problems(16, generator=s).prompt_tokens() for s in range(3)])
    gens = [torch.Generator().manual_seed(10 + s) for s in range(3)]
    out, chosen, logps = stack.sample(prompts, 8, MAX_ANSWER_CHARS, 1.0, gens, eos=EOS, pad=PAD, cap_with_eos=True)
    tokens = torch.cat([prompts.repeat_interleave(8, 0), out], 1)
    with torch.no_grad():
        scores = stack.completion_logits(tokens, 7, 8)[..., :15]
    for s, single in enumerate(singles):
        g = torch.Generator().manual_seed(10 + s)
        rows = slice(128 * s, 128 * (s + 1))
        o, c, lp = single.sample(prompts[16 * s:16 * (s + 1)], 8, MAX_ANSWER_CHARS, 1.0, [g], eos=EOS, pad=PAD,
                                 cap_with_eos=True)
        assert (o == out[rows]).all(1).float().mean() > 0.99
        assert torch.equal(g.get_state(), gens[s].get_state())
        with torch.no_grad():
            one = single.completion_logits(tokens[rows], 7, 8)[..., :15]
        assert (one - scores[rows]).abs().max() < STEP_TOL


def test_models_show_the_trained_weights_and_keep_them(sft):
    models = [copy.deepcopy(sft) for _ in range(2)]
    stack = TinyLMStack(models)
    with torch.no_grad():
        stack.weights["tok.weight"][1].add_(1.0)
    assert torch.equal(models[1].tok.weight, sft.tok.weight + 1.0)  # a view of seed 1's slice
    assert torch.equal(models[0].tok.weight, sft.tok.weight)
    stack.release()
    with torch.no_grad():
        stack.weights["tok.weight"][1].add_(1.0)
    assert torch.equal(models[1].tok.weight, sft.tok.weight + 1.0)  # released: its own copy now
    with pytest.raises(ValueError, match="twice"):
        TinyLMStack([sft, sft])
    with pytest.raises(ValueError, match="configuration"):
        TinyLMStack([TinyLM(), TinyLM(d=48)])


def test_equal_completions_get_equal_scores(sft):
    """A group is packed into one sequence, so two equal completions sit at different key
    positions; their scores must still be equal (else a group of equal answers would get
    advantages from rounding noise once a KL penalty enters the reward)."""
    stack = TinyLMStack([copy.deepcopy(sft)])
    prompts = sample_problems(4, generator=3).prompt_tokens()
    rows = torch.tensor([[1, 2, EOS, PAD, PAD], [3, EOS, PAD, PAD, PAD], [1, 2, EOS, PAD, PAD], [1, 2, EOS, PAD, PAD]])
    tokens = torch.cat([prompts.repeat_interleave(4, 0), rows.repeat(4, 1)], 1)
    assert canonical_rows(tokens[:, 7:], 4).tolist()[:4] == [0, 1, 0, 0]
    with torch.no_grad():
        lp = log_softmax(stack.completion_logits(tokens, 7, 4)[..., :15])
    for g in range(4):
        assert torch.equal(lp[4 * g], lp[4 * g + 2]) and torch.equal(lp[4 * g], lp[4 * g + 3])


def test_no_grad_passes_score_what_the_gradient_pass_scores(sft):
    # Without gradient the last layer goes on with the positions its head reads only (and the
    # LayerNorms are folded into the weights); with gradient every position goes through. Same
    # numbers up to rounding (another summation order: float32's last bits, relative to the size of the
    # logits: 1e-5 of the largest, which reaches about 11 for the sft model), for a batch above and below
    # the row count at which the pass keeps rows (KEEP_MIN_ROWS), one seed and three.
    from llmrl.stacked import KEEP_MIN_ROWS
    for models, n, G in (([copy.deepcopy(sft)], 16, 8), ([_perturbed(sft, s) for s in range(3)], 16, 8),
                         ([copy.deepcopy(sft)], 1, 2)):
        assert (n * (1 + G) >= KEEP_MIN_ROWS) == (n > 1)  # the big batch keeps rows, the small one does not
        stack = TinyLMStack(models)
        S = len(models)
        prompts = torch.cat([sample_problems(n, generator=s).prompt_tokens() for s in range(S)])
        gens = [torch.Generator().manual_seed(s) for s in range(S)]
        out, _, _ = stack.sample(prompts, G, MAX_ANSWER_CHARS, 1.0, gens, eos=EOS, pad=PAD, cap_with_eos=True)
        tokens = torch.cat([prompts.repeat_interleave(G, 0), out], 1)
        with torch.no_grad():
            fast = stack.completion_logits(tokens, 7, G)[..., :15]
            fast_rows = stack.row_logits(tokens, start=6)[..., :15]
        whole = stack.completion_logits(tokens, 7, G)[..., :15].detach()
        whole_rows = stack.row_logits(tokens, start=6)[..., :15].detach()
        assert fast.shape == whole.shape and fast_rows.shape == whole_rows.shape == (S * n * G, 6, 15)
        tol = STEP_TOL * max(1.0, float(whole.abs().max()))
        assert (fast - whole).abs().max() < tol
        assert (fast_rows - whole_rows).abs().max() < tol
        # position 6 on scores the completion: packed by group or one row each, the same logits
        assert (fast_rows[:, :5] - fast).abs().max() < 1e-4


def test_kept_decode_buffers_change_nothing(sft):
    # sample() keeps its key/value buffers between calls: what an earlier call (another batch,
    # other weights) left there is masked out, so the same stream gives the same tokens and
    # log-probs; after weights that give nan the buffers are dropped.
    stack = TinyLMStack([copy.deepcopy(sft)])
    prompts = sample_problems(16, generator=3).prompt_tokens()

    def draw(p, seed=7):
        return stack.sample(p, 8, MAX_ANSWER_CHARS, 1.0, [torch.Generator().manual_seed(seed)], eos=EOS, pad=PAD,
                            cap_with_eos=True)

    first = draw(prompts)
    assert stack._caches  # kept
    draw(sample_problems(16, generator=4).prompt_tokens(), seed=8)  # same shape: overwrites the buffers
    draw(prompts[:4])  # another shape: another buffer
    again = draw(prompts)
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    fresh = TinyLMStack([copy.deepcopy(sft)])  # a stack that never sampled: the same numbers too
    for a, b in zip(first, fresh.sample(prompts, 8, MAX_ANSWER_CHARS, 1.0, [torch.Generator().manual_seed(7)],
                                        eos=EOS, pad=PAD, cap_with_eos=True)):
        assert torch.equal(a, b)
    saved = {k: v.detach().clone() for k, v in stack.weights.items()}
    with torch.no_grad():
        stack.weights["blocks.0.qkv.weight"].fill_(float("nan"))
        draw(prompts)
        assert not stack._caches  # keys of nan weights are not kept
        for k, v in saved.items():
            stack.weights[k].copy_(v)
    for a, b in zip(first, draw(prompts)):
        assert torch.equal(a, b)
    import llmrl.stacked as stacked
    big = TinyLMStack([copy.deepcopy(sft)])
    keep, stacked.KEEP_CACHE_BYTES = stacked.KEEP_CACHE_BYTES, 1024  # a batch too big to keep buffers for
    try:
        for a, b in zip(first, big.sample(prompts, 8, MAX_ANSWER_CHARS, 1.0, [torch.Generator().manual_seed(7)],
                                          eos=EOS, pad=PAD, cap_with_eos=True)):
            assert torch.equal(a, b)
        assert not big._caches
    finally:
        stacked.KEEP_CACHE_BYTES = keep


def test_padded_softmax_is_the_softmax():
    x = torch.randn(50, 15) * 3
    assert torch.allclose(log_softmax(x), torch.log_softmax(x, -1), atol=1e-6)
    assert torch.isfinite(log_softmax(x)).all()


# ----------------------------------------------------------------------------- rl_train(seeds=...)

def _compare_step_by_step(single, batched, where):
    assert len(single) == len(batched), where
    for a, b in zip(single, batched):
        assert set(a) == set(b), where
        for k, x in a.items():
            if k == "step_seconds":
                continue
            y = b[k]
            if x is None or y is None:
                assert x is None and y is None, (where, a["step"], k, x, y)
            else:
                assert abs(x - y) <= STEP_TOL * max(1.0, abs(x)), (where, a["step"], k, x, y)


@pytest.mark.parametrize("settings", [
    dict(steps=6, lr=5e-4, kl_coef=0.05),  # lab19's hacking run: KL penalty in the reward
    dict(steps=4, lr=5e-4, epochs=3, minibatch_size=64, grad_accum_steps=2, advantage="std"),  # shuffled minibatches
    dict(steps=4, lr=3e-4, kl_coef=0.05, kl_mode="loss", kl_estimator="k3", max_grad_norm=0.5),
], ids=["kl-in-reward", "minibatches", "kl-in-loss"])
def test_each_seed_of_a_batched_run_is_its_single_run(sft, settings):
    cfg = RLConfig(**settings)
    reward = make_proxy_reward(0.1)
    seeds = [0, 3, 7]
    batched = rl_train(sft, cfg, seeds=seeds, reward_fn=reward, progress=False)
    assert isinstance(batched, SeedHistories) and batched.seeds == tuple(seeds)
    assert all(torch.equal(a, b) for a, b in zip(sft.parameters(), load_checkpoint("sft", progress=False).parameters()))  # untouched
    for s, hist in zip(seeds, batched):
        model = copy.deepcopy(sft)
        single = rl_train(model, cfg, seed=s, reward_fn=reward, progress=False)
        _compare_step_by_step(single, hist, f"seed {s}")
        trained = batched.policies[seeds.index(s)]
        for p, q in zip(model.parameters(), trained.parameters()):
            assert (p - q).abs().max() < 1e-5  # each seed's own weights, optimizer state and clipping


def test_distillation_with_a_teacher_and_teacher_rollouts():
    student, teacher = load_checkpoint("student", progress=False), load_checkpoint("teacher", progress=False)
    for loss in ("opd-full", "sft"):
        cfg = RLConfig(steps=3, n_prompts=8, loss=loss, rollout_from="teacher" if loss == "sft" else "policy",
                       track_reference_kl=False, max_grad_norm=None)
        batched = rl_train(student, cfg, seeds=[1, 2], teacher=teacher, progress=False)
        for s, hist in zip((1, 2), batched):
            _compare_step_by_step(rl_train(copy.deepcopy(student), cfg, seed=s, teacher=teacher, progress=False),
                                  hist, f"{loss} seed {s}")


def test_per_seed_pieces_see_their_own_seed_only(sft):
    """A stateful piece (a curriculum, a counter) is built per seed; hooks get that seed's rows."""
    seen = {}

    def per_seed(seed):
        calls = []

        def after_score(batch):
            calls.append(len(batch.rollout))
            return {"pad_share_small_sums": float(seed)}  # a metric of the vocabulary, to find it in the record

        seen[seed] = calls
        return {"hooks": Hooks(after_score=after_score), "eval_fn": lambda m: {"greedy_accuracy": float(seed)}}

    h = rl_train(sft, RLConfig(steps=2, n_prompts=4), seeds=[4, 5], per_seed=per_seed, eval_every=2, progress=False)
    assert seen == {4: [32, 32], 5: [32, 32]}
    assert [r["pad_share_small_sums"] for r in h[1] if r["step"] > 0] == [5.0, 5.0]
    assert h[0].series("eval_greedy_accuracy")[[0, -1]].tolist() == [4.0, 4.0]


@pytest.mark.slow
def test_a_long_batched_run_matches_single_runs_in_distribution(sft):
    """40 steps of lab19's hacking settings: whatever a flipped token could do over a long run, the
    batched seeds and the single runs agree on what they measure (means over the last 20 steps
    within a few standard errors of the run's own step-to-step noise)."""
    cfg = RLConfig(steps=40, lr=5e-4, kl_coef=0.02)
    reward = make_proxy_reward(0.1)
    seeds = [0, 1, 2]
    batched = rl_train(sft, cfg, seeds=seeds, reward_fn=reward, progress=False)
    for s, hist in zip(seeds, batched):
        single = rl_train(copy.deepcopy(sft), cfg, seed=s, reward_fn=reward, progress=False)
        for k in ("reward_mean", "sampled_accuracy", "completion_chars_mean", "kl_to_reference_k1_sum_nats"):
            a, b = single.series(k)[-20:], hist.series(k)[-20:]
            se = math.sqrt((a.var() + b.var()) / 20) + 1e-9
            assert abs(a.mean() - b.mean()) <= 4 * se, (s, k, a.mean(), b.mean(), se)


def test_seed_arguments_are_checked(sft):
    with pytest.raises(ValueError, match="distinct"):
        rl_train(sft, steps=1, seeds=[0, 0], progress=False)
    with pytest.raises(ValueError, match="per_seed"):
        rl_train(sft, steps=1, per_seed=lambda s: {}, progress=False)
    with pytest.raises(ValueError, match="unknown pieces"):
        rl_train(sft, steps=1, seeds=[0, 1], per_seed=lambda s: {"lr": 1.0}, progress=False)
    with pytest.raises(ValueError, match="one per seed"):
        rl_train([copy.deepcopy(sft)], steps=1, seeds=[0, 1], progress=False)
    with pytest.raises(TypeError, match="TinyLM"):
        rl_train("a model", steps=1, seeds=[0, 1], progress=False)


# ----------------------------------------------------------------------------- the optimizer

def test_each_seed_is_clipped_to_its_own_norm():
    torch.manual_seed(0)
    w = torch.zeros(2, 3, requires_grad=True)
    opt = PolicyOptimizer([w], lr=0.1, n_seeds=2)
    opt.zero_grad()
    (w * torch.tensor([[100.0, 0.0, 0.0], [0.3, 0.4, 0.0]])).sum().backward()
    norms = opt.step(1.0)
    assert norms == pytest.approx([100.0, 0.5])
    # seed 1 (norm 0.5 < 1) is not scaled by seed 0's huge gradient: its step is a lone AdamW's
    alone = torch.zeros(3, requires_grad=True)
    lone = torch.optim.AdamW([alone], lr=0.1)
    alone.grad = torch.tensor([0.3, 0.4, 0.0])
    lone.step()
    assert torch.allclose(w[1].detach(), alone.detach())
    assert float(w.grad[0].norm()) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="leading seed dimension"):
        PolicyOptimizer([torch.zeros(3, 2, requires_grad=True)], lr=0.1, n_seeds=2)
    single = PolicyOptimizer([torch.zeros(3, requires_grad=True)], lr=0.1)
    single.params[0].grad = torch.ones(3)
    assert isinstance(single.step(None), float)  # the plain optimizer (hw4's) returns one norm


def test_a_group_of_equal_rewards_has_no_advantage():
    x = torch.tensor(1.1891234)  # a float whose mean over 8 copies is not itself to the last bit
    r = torch.cat([x.repeat(8), torch.arange(8.0)])
    for kind in ("mean", "std", "maxrl"):
        adv = group_advantages(r, 8, kind)
        assert torch.equal(adv[:8], torch.zeros(8)), kind
        assert adv[8:].abs().sum() > 0


# ----------------------------------------------------------------------------- the runner

def test_runner_gives_an_arm_all_its_seeds_at_once(tmp_path):
    calls = []

    @seeds_together
    def arm(name, seeds, progress=False, scale=1.0):
        calls.append((name, list(seeds)))
        return [{"curve": {"step": [1], "x": [scale * s]}} for s in seeds]

    res = run_arms("t/batched", arm, ["a", "b"], seeds=[0, 1, 2], out_dir=tmp_path, scale=2.0,
                   resume_key=lambda a, s: "k", progress=False)
    assert calls == [("a", [0, 1, 2]), ("b", [0, 1, 2])]
    assert [r["seed"] for r in res["a"]] == [0, 1, 2] and res["b"][2]["curve"]["x"] == [4.0]
    assert (tmp_path / "t" / "batched" / "b_seed1.json").exists()
    (tmp_path / "t" / "batched" / "a_seed1.json").unlink()
    calls.clear()
    again = run_arms("t/batched", arm, ["a", "b"], seeds=[0, 1, 2], out_dir=tmp_path, scale=2.0,
                     resume_key=lambda a, s: "k", progress=False)
    assert calls == [("a", [1])]  # only what was missing runs again
    assert again == res

    @seeds_together
    def wrong(name, seeds, progress=False):
        return [{}]

    with pytest.raises(ValueError, match="returned 1 results"):
        run_arms("t/wrong", wrong, ["a"], seeds=[0, 1], progress=False)
