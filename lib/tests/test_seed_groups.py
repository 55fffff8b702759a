"""A seed's result does not depend on which seeds train beside it.

Every arm that trains its seeds as one computation (``@seeds_together``: lab19's ``reference_arm``
and lab21's ``_arm0`` .. ``_arm5``; hw4 has none, its sweep trains one seed per job) is run as
seeds [0, 1, 2], as [1, 2] and as [2] alone, at tiny budgets; seed 2 (and seed 1) must give the
same per-step metrics, evaluations and final weights in every grouping.

Tolerance: ``STEP_TOL`` = 1e-5, test_seeds.py's for step-by-step comparisons of short runs (a step
in which one seed's completions need fewer columns than another's packs the scorer's products
differently: last bits, ~1e-6 over a few steps). A rate (accuracy, usage) is a multiple of 1/B,
so a real difference (another prompt, another sampled token) is far outside it.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from llmrl.rl import train as trainer
from llmrl.addition import EOS, MAX_ANSWER_CHARS, PAD, sample_problems
from llmrl.sft.checkpoints import load_checkpoint
from llmrl.labs import lab19, lab21
from llmrl.stacked import TinyLMStack

STEP_TOL = 1e-5  # see the module docstring
# KEY_BIAS: the key third of each ``qkv.bias`` is left out of the weight comparison. Adding a vector
# to every key shifts all of a query's scores by one constant, which the softmax ignores: its
# gradient is zero up to rounding, and Adam divides that rounding noise by its own running size,
# so those entries take lr-sized steps (~1e-4 in 3 steps) on last-bit differences and change no output.
GROUPS = ([0, 1, 2], [1, 2], [2])
TINY = dict(steps=3, n_prompts=4, group_size=4)  # lab21's arms; evaluations shrunk per project below
LAB21 = {
    "project0": dict(TINY, eval_prompts=8, eval_samples=2),
    "project1": dict(TINY, eval_prompts=8, eval_samples=2),
    "project2": dict(TINY, eval_prompts=8, eval_samples=2),
    "project3": dict(TINY, eval_per_bucket=8),
    "project4": dict(TINY, eval_prompts=8, eval_samples=2),
    "project5": dict(TINY, eval_prompts=8, eval_samples=2),
}
LAB21_ARMS = [(p, a) for p, spec in lab21.PROJECTS.items() for a in spec.arms] + [("project5", "rl+kl")]


class _Recorder:
    """Wraps ``rl_train``: keeps each seed's final weights of every call, by seed."""

    def __init__(self, real):
        self.real, self.weights = real, {}

    def __call__(self, *args, **kwargs):
        out = self.real(*args, **kwargs)
        for seed, model in zip(out.seeds, out.policies):
            self.weights[seed] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return out


def _close(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= STEP_TOL * max(1.0, abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def _differences(res_a: dict, res_b: dict) -> list[str]:
    out = []
    for part in ("curve", "evals", "extra"):
        a, b = res_a.get(part, {}), res_b.get(part, {})
        for k in sorted(set(a) | set(b)):
            if k == "step_seconds":  # wall time, not a result
                continue
            if not _close(a.get(k), b.get(k)):
                out.append(f"{part}[{k!r}]: {a.get(k)} vs {b.get(k)}")
    return out


def _check_groupings(run_group, recorder: _Recorder) -> None:
    """``run_group(seeds) -> [result per seed]``; seeds 1 and 2 must agree across :data:`GROUPS`."""
    got, weights = {}, {}
    for group in GROUPS:
        recorder.weights = {}
        results = run_group(group)
        assert len(results) == len(group)
        for seed, res in zip(group, results):
            got[(tuple(group), seed)] = res
            weights[(tuple(group), seed)] = recorder.weights[seed]
    problems = []
    for seed in (1, 2):
        groups = [tuple(g) for g in GROUPS if seed in g]
        base = groups[-1]
        for g in groups[:-1]:
            problems += [f"seed {seed}, {list(g)} vs {list(base)}: {d}" for d in
                         _differences(got[(g, seed)], got[(base, seed)])[:5]]
            for name, w in weights[(g, seed)].items():
                d = (w - weights[(base, seed)][name]).abs()
                if name.endswith("qkv.bias"):  # the key bias: see KEY_BIAS
                    d = torch.cat([d[:len(d) // 3], d[2 * len(d) // 3:]])
                gap = float(d.max())
                if gap > STEP_TOL:
                    problems.append(f"seed {seed}, {list(g)} vs {list(base)}: weight {name} differs by {gap:.3g}")
    assert not problems, "a seed's result depends on the seeds beside it:\n" + "\n".join(problems[:20])


@pytest.mark.parametrize("project,arm", LAB21_ARMS, ids=[f"{p}-{a}" for p, a in LAB21_ARMS])
def test_lab21_arm_does_not_depend_on_its_seed_group(project, arm, monkeypatch):
    rec = _Recorder(lab21.rl_train)
    monkeypatch.setattr(lab21, "rl_train", rec)
    fn = lab21.PROJECTS[project].arm_fn
    assert getattr(fn, "seeds_together", False)
    _check_groupings(lambda seeds: fn(arm, list(seeds), **LAB21[project]), rec)


@pytest.mark.parametrize("arm", lab19.REFERENCE_ARMS)
def test_lab19_arm_does_not_depend_on_its_seed_group(arm, monkeypatch):
    rec = _Recorder(trainer.rl_train)
    monkeypatch.setattr(trainer, "rl_train", rec)  # lab19's runs import it at call time
    for settings in (lab19.HACK_SETTINGS, lab19.ENTROPY_SETTINGS):
        for k, v in dict(steps=3, n_prompts=4, group_size=4).items():
            monkeypatch.setitem(settings, k, v)
    assert getattr(lab19.reference_arm, "seeds_together", False)
    _check_groupings(lambda seeds: lab19.reference_arm(arm, list(seeds)), rec)


def test_every_seeds_together_arm_is_covered():
    """A new ``@seeds_together`` arm in lab19 or lab21 must be added above."""
    import inspect
    for mod, covered in ((lab21, {spec.arm_fn for spec in lab21.PROJECTS.values()}), (lab19, {lab19.reference_arm})):
        marked = {f for _, f in inspect.getmembers(mod, callable) if getattr(f, "seeds_together", False)}
        assert marked == covered, f"{mod.__name__}: {marked - covered} not covered"


def _multinomial_sampler(logits, temperature, generator):  # a student's sampler: one draw per row and step
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator).flatten()


@pytest.mark.parametrize("sampler", [None, _multinomial_sampler], ids=["built-in", "custom sampler"])
def test_a_seed_whose_rows_end_early_draws_as_alone(sampler):
    """The decode loop of a stack runs until every seed's rows are done; a seed done earlier must
    leave its generator where a run of that seed alone leaves it (else its next draws differ), with
    the built-in draw and with a custom ``sampler``. Seed 0 answers 3d+1d problems (3-4 digits),
    seed 1 1d+1d ones (1-2 digits)."""
    sft = load_checkpoint("sft", progress=False)
    prompts = [sample_problems(2, ["3d+1d"], 0).prompt_tokens(), sample_problems(2, ["1d+1d"], 1).prompt_tokens()]
    stack = TinyLMStack([copy.deepcopy(sft), copy.deepcopy(sft)])
    gens = [torch.Generator().manual_seed(10 + s) for s in range(2)]
    out, _, _ = stack.sample(torch.cat(prompts), 4, MAX_ANSWER_CHARS, 1.0, gens, eos=EOS, pad=PAD, cap_with_eos=True,
                             sampler=sampler)
    lengths = [int((out[8 * s:8 * (s + 1)] == EOS).float().argmax(1).max()) for s in range(2)]  # decode steps
    assert lengths[0] > lengths[1], f"the prompts should give seed 1 shorter completions, got {lengths}"
    for s in range(2):
        g = torch.Generator().manual_seed(10 + s)
        one, _, _ = TinyLMStack([copy.deepcopy(sft)]).sample(prompts[s], 4, MAX_ANSWER_CHARS, 1.0, [g], eos=EOS,
                                                             pad=PAD, cap_with_eos=True, sampler=sampler)
        assert torch.equal(one, out[8 * s:8 * (s + 1), :one.shape[1]])
        assert torch.equal(g.get_state(), gens[s].get_state()), f"seed {s}'s generator moved on differently"
