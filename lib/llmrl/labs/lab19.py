"""Lab 19 (failure modes you can watch happen): experiments, reference runs, plots and widgets.

Part 1 (overoptimization) lives in :mod:`llmrl.labs.overopt`; this module draws its widget.
Part 2 (reward hacking): :func:`hacking_run` trains the SFT TinyLM with the flawed
:func:`llmrl.tasks.rewards.proxy_reward` (or the gold exact-match reward), optionally with a KL penalty
folded into the reward by the student's ``kl_penalized_rewards``.
Part 3 (entropy collapse): :func:`entropy_run` trains with 4 epochs per batch under one of three
clip settings (:data:`CLIP_ARMS`) and records which tokens the upper clip switches off.

The notebook trains parts 2 and 3 at full length on the student's functions, five seeds of each run
as one computation (:func:`part2_runs`, :func:`part3_runs`). The reference code's runs of the same
settings are stored in ``lab19_reference.json`` (made by :func:`compute_reference`;
``python -m llmrl.labs.lab19 reference`` rebuilds it): the notebook checks the student's runs
against them on seed 0 (:func:`check_part2`, :func:`check_part3`) and its beta slider draws them.

:data:`EXPECTED` holds the published numbers; :func:`expected_report` prints them beside ours.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Callable

import numpy as np

from . import overopt
from ..rl.losses import clipped_pg_loss
from ..experiments.plotting import figure_png, save
from ..tasks.rewards import exact_match, make_proxy_reward
from ..experiments.runner import seeds_together
from ..utils import check_float, mean_sd  # noqa: F401 (lab19.mean_sd: the notebook's name for it)
# the runs' curves and summaries and Part 1's figures live in lab19_analysis.py; the notebook and the
# tools keep reaching them as lab19.<name>
from .lab19_analysis import (  # noqa: F401
    HACK_DONE, MID_WINDOW, PANEL_BIASED, PANEL_NOISY, SERIES, _align, _arr, _draw, _rolling, as_series, bon_figure,
    bon_widget, entropy_summary, hack_completed, hack_summary, overopt_figure, seed_runs, seed_summary, smooth)

ARTIFACTS = Path("artifacts") / "lab19"
#: The seeds of the stored runs and of the notebook's runs.
REFERENCE_SEEDS = (0, 1, 2, 3, 4)
REFERENCE_PATH = Path(__file__).with_name("lab19_reference.json")

#: The published "what you should see" (a reference solution on its own machine and model).
EXPECTED = {
    # Part 1, b = 1 (sigma = 1)
    "bon_peak_n": 10, "bon_peak_kl": 1.4, "bon_peak_gold_gain": 0.66,
    "bon_gold_gain_n3000_sign": "negative", "gao_alpha": 1.1, "gao_beta": 0.47,
    "noise_only_gao_beta": 0.0,
    "pool_gold_gain_n3000": -0.4, "exact_gold_gain_n3000": 0.10,
    # Part 2
    "hack_accuracy_start": 0.52, "hack_accuracy_around_50": 0.62, "hack_peak_step": 50,
    "hack_final_accuracy": 0.0, "hack_final_length": 4.0, "hack_final_kl": 15.0,
    "kl005_final_accuracy": 0.75, "gold_final_accuracy": 0.80,
    # Part 3
    "entropy_start": 0.35, "entropy_end_clipped": 0.15, "entropy_end_no_upper": 0.19,
    "clip_high_of_positive_rare": 0.90, "clip_high_of_positive_common": 0.0,
}

def _seeds_of(values: dict, key: str) -> list[float]:
    v = values.get(key, [])
    return [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


def _hack_note(values: dict) -> str | None:
    """Under the hack's end: how many seeds completed it, computed from the numbers printed above it."""
    length, acc = _seeds_of(values, "hack_final_length"), _seeds_of(values, "hack_final_accuracy")
    kl = _seeds_of(values, "hack_final_kl")
    if len(length) < 2 or len(length) != len(acc):
        return None  # one number (a mean over seeds, or one run) cannot say how many runs completed it
    done = [i for i, (n, a) in enumerate(zip(length, acc)) if n >= HACK_DONE["length"] and a <= HACK_DONE["accuracy"]]
    if len(done) == len(length):
        return (f"every seed completed the hack within 300 steps (length {min(length):.2f}-{max(length):.2f}, "
                f"accuracy at most {max(acc):.2f}, KL {min(kl):.1f}-{max(kl):.1f} nats), as in the published run")
    rest = [i for i in range(len(length)) if i not in done]
    return (f"the complete hack (length >= {HACK_DONE['length']}, accuracy <= {HACK_DONE['accuracy']} over the last "
            f"20 steps) came in {len(done)} of {len(length)} runs; the others still pad part of the way at step 300 "
            f"(length {min(length[i] for i in rest):.2f}-{max(length[i] for i in rest):.2f}, accuracy "
            f"{min(acc[i] for i in rest):.2f}-{max(acc[i] for i in rest):.2f}): the published statement is one run's")


def _entropy_note(values: dict) -> str | None:
    """Under the entropies: whether they reached the published levels, from the numbers above."""
    clipped, free = _seeds_of(values, "entropy_end_clipped"), _seeds_of(values, "entropy_end_no_upper")
    if not clipped:
        return None
    m, m_free = float(np.mean(clipped)), float(np.mean(free)) if free else float("nan")
    if abs(m - EXPECTED["entropy_end_clipped"]) <= 0.03 and (not free or abs(m_free - EXPECTED["entropy_end_no_upper"]) <= 0.03):
        return None
    return (f"after 120 steps the clipped runs' entropy is {m:.3f} and without an upper clip {m_free:.3f}, against "
            "the published ~0.15 and ~0.19: on this model the entropy falls more slowly per step (no candidate "
            "of the search for the sft model reached 0.15 +- 0.03 at lab19's settings: docs/lab19-calibration.md)")


def _clip_note(values: dict) -> str | None:
    rare = _seeds_of(values, "clip_high_of_positive_rare")
    if not rare or float(np.mean(rare)) > EXPECTED["clip_high_of_positive_rare"]:
        return None
    return (f"{float(np.mean(rare)):.2f} of the rare positive-advantage tokens, below the published 'over 0.90' "
            "(counted in epochs 2-4 of the second half of the run, where clipping is possible)")


_SHARPER_SFT = ("the shipped SFT model is sharper at T = 1 than the published one: of the 17 candidates searched for "
                "it, the only one through all three gates (entropy after 120 steps, the hack completed, greedy "
                "accuracy) starts here")


def _differs(key: str, tol: float, why: str, fmt: str = "{:.3f}"):
    """A note for ``key`` when the mean over seeds printed above lies more than ``tol`` from the published
    value (the tolerance of the reproduction's claim for it); none within it."""
    def note(values: dict) -> str | None:
        seeds = _seeds_of(values, key)
        if not seeds or abs(round(float(np.mean(seeds)), 3) - EXPECTED[key]) <= tol + 1e-12:  # as printed
            return None
        return f"differs from the published {EXPECTED[key]}: {fmt.format(float(np.mean(seeds)))} is more than {tol} away; {why}"
    return note


def _noise_beta_note(values: dict) -> str | None:
    """Under the noise-only fit's beta: 'about 0' in size, but a sign shared by every pool is not noise."""
    pools = _seeds_of(values, "noise_only_gao_beta")
    if len(pools) < 2 or not (all(b < 0 for b in pools) or all(b > 0 for b in pools)):
        return None
    return (f"{'negative' if pools[0] < 0 else 'positive'} on every pool ({', '.join(f'{b:.3f}' for b in pools)}): small "
            "beside the length-biased proxy's beta, but not zero: without the bias the gold gain never turns down, "
            "and a negative beta means it grows a little faster than linearly in d over this grid of n")


#: Notes printed under the numbers by :func:`expected_report`: a text, or a function of the values
#: printed (so that a note can only say what the numbers above it show), None when there is nothing
#: to note.
NOTES = {
    "exact_gold_gain_n3000": (
        "differs from the published +0.10. A pool of 200,000 is a fair sample at n = 3000: over pool "
        "seeds its value scatters around the exact one, so the published pool's -0.4 and exact +0.10 "
        "cannot both hold in the mean over seeds. The pool model is calibrated to the pool's value, the "
        "peak at best-of-10 and the fit (alpha 1.1 and beta 0.47 themselves give -0.38 at n = 3000); no "
        "candidate of the search put the exact value near +0.10 with the peak at best-of-10."),
    "noise_only_gao_beta": _noise_beta_note,
    "hack_accuracy_start": _differs("hack_accuracy_start", 0.05, _SHARPER_SFT),
    "hack_peak_step": _differs("hack_peak_step", 25, "the step of the best 10-step window scatters widely from seed "
                               "to seed (it is a location, not a level): on some seeds accuracy keeps rising well past "
                               "step 50 before the hack takes over, on others it peaks before step 30", "{:.0f}"),
    "hack_final_kl": _hack_note,
    "entropy_start": _differs("entropy_start", 0.03, _SHARPER_SFT),
    "entropy_end_no_upper": _entropy_note,
    "clip_high_of_positive_rare": _clip_note,
}

#: Settings of the reward-hacking runs (SFT TinyLM, 16 prompts x 8 samples, mean-centred advantages).
HACK_SETTINGS = dict(steps=300, lr=5e-4, advantage="mean", seed=0)
SWEEP_BETAS = (0.0, 0.01, 0.02, 0.05)
#: Settings of the entropy runs: 4 gradient epochs on each batch, exact-match reward.
ENTROPY_SETTINGS = dict(steps=120, lr=5e-4, epochs=4, seed=0)
#: (eps_low, eps_high) of the three clip settings; None removes that bound.
CLIP_ARMS = {"symmetric": (0.2, 0.2), "clip-higher": (0.2, 0.28), "no upper clip": (0.2, None)}
#: The per-step metrics the stored runs keep (names: :data:`llmrl.rl.metrics.METRICS`).


# ----------------------------------------------------------------------------------- part 2

def hacking_run(kl_coef: float = 0.0, *, reward: str | Callable = "proxy", length_bonus: float = 0.1,
                kl_reward_fn: Callable | None = None, policy=None, progress: bool = True, seeds=None,
                **overrides):
    """RL from the SFT checkpoint against the proxy (or "gold") reward with KL coefficient ``kl_coef``
    (:attr:`llmrl.rl.config.RLConfig.kl_coef`: the lab's beta, which the notebook passes positionally).

    ``reward`` may also be a function (responses [N] str, answers [N] int) -> float tensor [N]
    (the notebook's "things to try" pass their own variants of the proxy).

    ``kl_reward_fn`` (rewards [B], logprobs [B, R], ref_logprobs [B, R], mask [B, R], kl_coef) -> [B]
    is the student's ``kl_penalized_rewards``: the trainer passes the run's ``kl_coef`` as its last
    argument, by position, so the hook may name it as it likes (the student's function calls it
    beta); None uses the trainer's own (k1 summed over real tokens). ``policy``: a TinyLM to start
    from instead of the SFT checkpoint (the shipped models' rebuild tries its candidates).
    ``overrides`` replace :data:`HACK_SETTINGS` or other RLConfig fields. Returns a History; with ``seeds=[0, 1, 2, 3, 4]`` every seed trains its own copy of the
    checkpoint, all seeds as one computation, and the result is one History per seed
    (:class:`llmrl.rl.train.SeedHistories`).
    """
    from ..sft.checkpoints import load_checkpoint
    from ..rl.config import RLConfig
    from ..rl.train import rl_train

    kl_coef = check_float("kl_coef", kl_coef, minimum=0.0)
    if callable(reward):
        reward_fn = reward
    elif reward not in ("proxy", "gold"):
        raise ValueError(f"reward must be 'proxy', 'gold' or a reward function, got {reward!r}")
    else:
        reward_fn = make_proxy_reward(length_bonus) if reward == "proxy" else exact_match
    settings = {**HACK_SETTINGS, **overrides}
    policy = load_checkpoint("sft", progress=False) if policy is None else policy
    return rl_train(policy, RLConfig(kl_coef=kl_coef, **settings), reward_fn=reward_fn,
                    kl_reward_fn=kl_reward_fn, progress=progress, seeds=seeds)



# ----------------------------------------------------------------------------------- part 3

def late_clip_stats(epoch: int, stats: dict) -> dict:
    """The step's ``after_minibatch`` hook: the upper clip's shares of rare and common tokens,
    counted only from the second epoch on (``late_`` keys).

    In the first epoch the policy still equals the sampling policy (ratio = 1), so nothing can be
    clipped; the ``late_`` keys are NaN there (the step's mean skips NaN), so they average over
    epochs 2..E. The plain keys are the step's clip statistics (the library's, whatever the loss
    returns)."""
    return {"late_" + k: stats.get(k, float("nan")) if epoch > 0 else float("nan")
            for k in ("clip_high_of_positive_rare", "clip_high_of_positive_common")}


def entropy_run(arm: str = "symmetric", *, policy_loss_fn: Callable | None = None, policy=None,
                progress: bool = True, seeds=None, **overrides):
    """RL with several epochs per batch under one clip setting of :data:`CLIP_ARMS`.

    ``policy_loss_fn`` (LossBatch) -> loss or (loss, stats) is the student's ``clipped_pg_loss``
    (None: the library's). ``overrides`` replace :data:`ENTROPY_SETTINGS` or the arm's
    ``eps_low`` / ``eps_high`` (e.g. ``eps_high=0.4``). ``policy`` (default: a fresh SFT checkpoint)
    is trained in place. Returns a History; with ``seeds=[...]`` one History per seed, every seed
    training its own copy of ``policy``, all as one computation.
    """
    from ..sft.checkpoints import load_checkpoint
    from ..rl.run import Hooks
    from ..rl.config import RLConfig
    from ..rl.train import rl_train

    if arm not in CLIP_ARMS:
        raise ValueError(f"arm must be one of {list(CLIP_ARMS)}, got {arm!r}")
    eps_low, eps_high = CLIP_ARMS[arm]
    settings = {**ENTROPY_SETTINGS, "eps_low": eps_low, "eps_high": eps_high, **overrides}
    policy = load_checkpoint("sft", progress=False) if policy is None else policy
    return rl_train(policy, RLConfig(**settings), policy_loss_fn=policy_loss_fn or clipped_pg_loss,
                    hooks=Hooks(after_minibatch=late_clip_stats), progress=progress, seeds=seeds)


def entropy_inputs(model, n_prompts: int = 64, seed: int = 0):
    """Full-sequence logits [B, T, V] of ``model`` on its own samples (T = 1) and a bool mask [B, T]
    that is True at the columns whose logits choose a real response token (prompt columns and
    padding False). Returns (logits, mask, rollout)."""
    import torch

    from ..tasks.addition import PROMPT_LEN, eval_problems
    from ..lm.sampling import generate

    rollout = generate(model, eval_problems(n_prompts), 1, 1.0, seed)
    with torch.no_grad():
        logits = model(rollout.tokens)
    R = rollout.response_mask.shape[1]
    mask = torch.zeros(rollout.tokens.shape, dtype=torch.bool)
    mask[:, PROMPT_LEN - 1:PROMPT_LEN - 1 + R] = rollout.response_mask
    return logits, mask, rollout


def policy_entropy(model, entropy_fn: Callable, n_prompts: int = 64, seed: int = 0) -> tuple[float, float]:
    """(entropy_fn's value, the library's value) of the mean per-token entropy on ``model``'s samples."""
    from ..rl.evaluation import mean_token_entropy

    logits, mask, rollout = entropy_inputs(model, n_prompts, seed)
    return float(entropy_fn(logits, mask)), mean_token_entropy(model, rollout)


# ------------------------------------------------------------------------------- the notebook's runs

#: The runs of part 2's plot, {key: (beta, reward)}; the keys are those of the stored runs.
PART2_ARMS = {"0": (0.0, "proxy"), "0.05": (0.05, "proxy"), "gold": (0.0, "gold")}
#: Steps at the start of a run that the checks compare with the reference code's run of the same seed.
CHECK_STEPS = 30


def part2_runs(kl_reward_fn: Callable | None = None, seeds=REFERENCE_SEEDS, steps: int | None = None,
               progress: bool = False, stored: dict | None = None) -> dict:
    """Part 2's three runs (:data:`PART2_ARMS`) with ``kl_reward_fn`` (the student's
    ``kl_penalized_rewards``; None: the trainer's) shaping the rewards: {key: one run per seed},
    every run's seeds trained as one computation; ``steps`` None is the full length.

    ``stored`` (:func:`load_reference`'s dict): the arms with beta = 0 (no KL, gold) call no
    penalty, so no function of the student's; they are taken from the stored runs of the same code
    and seeds (series dicts, cut to ``steps``) instead of being trained again. Only seeds the
    stored runs hold can be taken; others are trained."""
    over = {} if steps is None else {"steps": steps}
    out = {}
    for key, (beta, reward) in PART2_ARMS.items():
        held = (stored or {}).get("hacking_seeds", {}).get(key)
        if beta == 0 and held is not None and set(seeds) <= set(stored["seeds"]):
            n = steps or HACK_SETTINGS["steps"]
            out[key] = [{k: v[:n] for k, v in held[stored["seeds"].index(s)].items()} for s in seeds]
            continue
        out[key] = hacking_run(beta, reward=reward, kl_reward_fn=kl_reward_fn, seeds=list(seeds), progress=progress,
                               **over)
    return out


def part3_runs(policy_loss_fn: Callable | None = None, seeds=REFERENCE_SEEDS, steps: int | None = None,
               progress: bool = False) -> dict:
    """Part 3's three clip arms with ``policy_loss_fn`` (the student's ``clipped_pg_loss``; None:
    the library's): {arm: one History per seed}, each arm's seeds as one computation."""
    over = {} if steps is None else {"steps": steps}
    return {arm: entropy_run(arm, policy_loss_fn=policy_loss_fn, seeds=list(seeds), progress=progress, **over)
            for arm in CLIP_ARMS}


def _seed0(runs):
    """Seed 0's History of a run of several seeds (None if seed 0 is not among them)."""
    seeds = list(getattr(runs, "seeds", ()) or [])
    return runs[seeds.index(0)] if 0 in seeds else None


def _check_start(label: str, run, stored: dict, keys, task: str, quiet: bool = False) -> bool:
    from ..experiments import live_checks

    if run is None:
        print(f"{label}: not checked (seed 0 is not among the seeds run)")
        return False
    n = min(CHECK_STEPS, len(run.series(keys[0])))
    # the stored run is the reference code with the same seed: a correct function gives the same
    # numbers (1e-3: the stored values are rounded to 5 decimals and a different sum order drifts)
    return live_checks.compare_exact(label, [run.series(k)[:n] for k in keys], [stored[k][:n] for k in keys],
                                     task=task, atol=1e-3, quiet=quiet)


def check_part2(runs: dict, reference: dict | None = None, quiet: bool = False) -> bool:
    """Seed 0 of the student's beta = 0.05 run against the reference code's over its first
    :data:`CHECK_STEPS` steps (shaped rewards and KL); prints the verdict, returns it."""
    ref = reference or load_reference()
    return _check_start("Part 2, your beta = 0.05 run against the reference code (seed 0)", _seed0(runs["0.05"]),
                        ref["hacking"]["0.05"], ("shaped_reward_mean", "kl_to_reference_k1_sum_nats"),
                        "Task 2 (`kl_penalized_rewards`)", quiet)


def check_part3(runs: dict, reference: dict | None = None, quiet: bool = False) -> bool:
    """Seed 0 of the student's symmetric-clip run against the reference code's over its first
    :data:`CHECK_STEPS` steps (accuracy and entropy); prints the verdict, returns it."""
    ref = reference or load_reference()
    return _check_start("Part 3, your symmetric-clip run against the reference code (seed 0)",
                        _seed0(runs["symmetric"]), ref["entropy"]["symmetric"],
                        ("sampled_accuracy", "entropy_token_mean_nats"), "Task 3 (`clipped_pg_loss`)", quiet)


# ------------------------------------------------------------------------------- reference

REFERENCE_ARMS = tuple(f"hacking/{b:g}" for b in SWEEP_BETAS) + ("hacking/gold",) + tuple(f"entropy/{a}" for a in CLIP_ARMS)


@seeds_together
def reference_arm(arm: str, seeds=(0,), progress: bool = False) -> list[dict]:
    """The stored runs of one arm, one result of the runner's schema per seed (all seeds trained as
    one computation): ``hacking/<beta>``, ``hacking/gold`` or ``entropy/<clip arm>``, at the full
    length of :data:`HACK_SETTINGS` / :data:`ENTROPY_SETTINGS`."""
    from ..experiments.runner import result_from_history

    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    kind, _, name = arm.partition("/")
    if kind == "hacking":
        gold = name == "gold"
        histories = hacking_run(0.0 if gold else float(name), reward="gold" if gold else "proxy", seeds=seeds,
                                progress=progress)
        config = {**HACK_SETTINGS, "beta": 0.0 if gold else float(name), "reward": "gold" if gold else "proxy"}
    elif kind == "entropy" and name in CLIP_ARMS:
        histories = entropy_run(name, seeds=seeds, progress=progress)
        config = {**ENTROPY_SETTINGS, "arm": name}
    else:
        raise ValueError(f"arm must be one of {REFERENCE_ARMS}, got {arm!r}")
    out = []
    for seed, history in zip(seeds, histories):
        res = result_from_history(history, {**config, "seed": seed}, SERIES)
        res["curve"] = {k: v if k == "step" else [None if x is None else round(x, 5) for x in v]
                        for k, v in res["curve"].items()}  # five decimals keep the stored file small
        out.append(res)
    return out





def compute_reference(path: Path | str | None = REFERENCE_PATH, progress: bool = True, workers: int = 2,
                      seeds=REFERENCE_SEEDS) -> dict:
    """Run every full-length run of parts 2 and 3 for ``seeds`` (an arm's seeds as one computation,
    ``workers`` processes; minutes) and store them in the runner's result schema; returns
    :func:`load_reference`'s view of them."""
    from ..experiments.runner import run_arms

    results = run_arms("lab19", reference_arm, REFERENCE_ARMS, seeds, workers=workers, progress=progress)
    blob = {"experiment": "lab19", "settings": {"hacking": HACK_SETTINGS, "entropy": ENTROPY_SETTINGS},
            "checkpoint": start_checkpoint(), "runs": [r for arm in REFERENCE_ARMS for r in results[arm]]}
    if path is not None:
        Path(path).write_text(json.dumps(blob, separators=(",", ":")))
    return _reference_view(blob)


def start_checkpoint() -> dict:
    """Which SFT checkpoint the runs start from: its SFT step and the sha256 of its shipped file
    (llmrl.store.shipped). When the shipped models are rebuilt, the stored runs must be rebuilt too."""
    from ..sft.checkpoints import load_checkpoint

    _, meta = load_checkpoint("sft", progress=False, with_meta=True)
    return {"name": "sft", "step": meta.get("step"), "sha256": meta.get("sha256")}


def _reference_view(blob: dict) -> dict:
    runs = sorted(blob["runs"], key=lambda r: r["seed"])
    seeds = sorted({r["seed"] for r in runs})

    def part(kind):
        out = {}
        for r in runs:
            if r["arm"].startswith(kind + "/"):
                out.setdefault(r["arm"].split("/", 1)[1], []).append(r["curve"])
        return out

    first = [r for r in runs if r["seed"] == seeds[0]]
    return {"hack_settings": blob["settings"]["hacking"], "entropy_settings": blob["settings"]["entropy"],
            "checkpoint": blob.get("checkpoint"), "seeds": seeds,
            "hacking": {r["arm"].split("/", 1)[1]: r["curve"] for r in first if r["arm"].startswith("hacking/")},
            "entropy": {r["arm"].split("/", 1)[1]: r["curve"] for r in first if r["arm"].startswith("entropy/")},
            "hacking_seeds": part("hacking"), "entropy_seeds": part("entropy"), "runs": blob["runs"]}


def load_reference(path: Path | str = REFERENCE_PATH) -> dict:
    """The stored reference runs by part: {"hacking": {"0", "0.01", "0.02", "0.05", "gold"},
    "entropy": {arm}}, each the first seed's dict of per-step series; "hacking_seeds" and
    "entropy_seeds" hold every stored seed's (lists, "seeds" says which); ``"runs"`` holds the
    runner's results."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m llmrl.labs.lab19 reference` to make it")
    return _reference_view(json.loads(path.read_text()))


def sweep_run(reference: dict, beta: float) -> dict:
    """The stored hacking run nearest to ``beta`` (the slider's value)."""
    beta = check_float("beta", beta, minimum=0.0)
    keys = [k for k in reference["hacking"] if k != "gold"]
    key = min(keys, key=lambda k: abs(float(k) - beta))
    return reference["hacking"][key]


# ------------------------------------------------------------------------------- reports

def part2_values(reference: dict | None = None) -> dict[str, list[float]]:
    """Part 2's numbers under the keys of :data:`EXPECTED`, one value per stored seed (lists in
    the order of ``reference["seeds"]``): the hacking run without KL, beta = 0.05 and gold."""
    ref = reference or load_reference()
    hs = ref.get("hacking_seeds") or {k: [v] for k, v in ref["hacking"].items()}
    h, k, g = ([hack_summary(r) for r in hs[arm]] for arm in ("0", "0.05", "gold"))
    out = {f"hack_{name}": [x[name] for x in h] for name in
           ("accuracy_start", "peak_step", "final_accuracy", "final_length", "final_kl")}
    out["hack_accuracy_around_50"] = [x["accuracy_mid"] for x in h]
    out["kl005_final_accuracy"] = [x["final_accuracy"] for x in k]
    out["gold_final_accuracy"] = [x["final_accuracy"] for x in g]
    return out


def part3_values(reference: dict | None = None) -> dict[str, list[float]]:
    """Part 3's numbers under the keys of :data:`EXPECTED`, one value per stored seed."""
    ref = reference or load_reference()
    es = ref.get("entropy_seeds") or {k: [v] for k, v in ref["entropy"].items()}
    sym, hi, none = ([entropy_summary(r) for r in es[a]] for a in CLIP_ARMS)
    return {"entropy_start": [x["entropy_start"] for x in sym],
            "entropy_end_clipped": [0.5 * (a["entropy_end"] + b["entropy_end"]) for a, b in zip(sym, hi)],
            "entropy_end_no_upper": [x["entropy_end"] for x in none],
            "clip_high_of_positive_rare": [x["late_clip_high_of_positive_rare"] for x in sym],
            "clip_high_of_positive_common": [x["late_clip_high_of_positive_common"] for x in sym]}


def measured(reference: dict | None = None) -> dict:
    """Our numbers under the keys of :data:`EXPECTED`: part 1 exact/pool, parts 2-3 the mean over
    the stored seeds (:func:`part2_values`, :func:`part3_values` give every seed's)."""
    out = {}
    e = overopt.exact_best_of_n()
    pool = overopt.pool_curves(overopt.make_pool())
    pk = overopt.peak(pool)
    out["bon_peak_n"], out["bon_peak_kl"], out["bon_peak_gold_gain"] = pk["n"], pk["kl"], pk["gold_gain"]
    out["bon_gold_gain_n3000_sign"] = "negative" if pool["gold_gain"][-1] < 0 else "positive"
    out["gao_alpha"], out["gao_beta"] = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    noise = overopt.pool_curves(overopt.make_pool(b=0.0))
    out["noise_only_gao_beta"] = overopt.fit_gao_bon(noise["d"], noise["gold_gain"])[1]
    out["pool_gold_gain_n3000"] = float(pool["gold_gain"][-1])
    out["exact_gold_gain_n3000"] = float(e["gold_gain"][-1])
    ref = reference or load_reference()
    for k, v in {**part2_values(ref), **part3_values(ref)}.items():
        out[k] = float(np.mean(v))
    return out


def expected_report(values: dict, keys=None, notes: dict | None = NOTES) -> str:
    """Lines "key: ours vs published" for the keys of :data:`EXPECTED` present in ``values``; a
    list of values (one per seed) is given as mean ± standard deviation over the seeds. A key of
    ``notes`` (default :data:`NOTES`, the numbers we could not match and why) gets its note on
    the next line."""
    lines = []
    for k in (keys or EXPECTED):
        if k not in values:
            continue
        ours, theirs = values[k], EXPECTED[k]
        if isinstance(ours, (list, tuple)) and len(ours) == 1:
            ours = ours[0]
        if isinstance(ours, (list, tuple)):
            m, sd = mean_sd(ours)
            d = 1 if all(isinstance(v, int) for v in ours) else 3  # a step number: one decimal
            text = f"{m:8.{d}f} ± {sd:.{d}f} ({len(ours)} seeds)"
        elif isinstance(ours, float):
            text = f"{ours:8.3f}"
        else:
            text = f"{ours!s:>8}"
        lines.append(f"{k:32s} ours {text}   published {theirs!s:>8}")
        note = (notes or {}).get(k)
        note = note(values) if callable(note) else note
        if note:
            lines.extend("    " + part for part in textwrap.wrap("note: " + note, 96))
    return "\n".join(lines)


def plot_hacking(runs: dict, path=None, live: dict | None = None, title: str = "", window: int = 10,
                 colors: dict | None = None):
    """Accuracy, proxy reward, length and KL per step for labelled runs; returns the figure.

    A run is one seed (a series dict or a History) or several (a list of them, a SeedHistories,
    ``reference["hacking_seeds"][beta]``): several are drawn as their mean, a band from the lowest
    to the highest seed and each seed thin. Run i is drawn in colour C<i> unless ``colors``
    ({label: colour}) names another; ``live`` runs are black (dashed for one seed).
    """
    import matplotlib.pyplot as plt

    colors = colors or {}
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.9))
    panels = [("sampled_accuracy", "exact-match accuracy"), ("reward_mean", "training reward"),
              ("completion_chars_mean", "response length (characters)"),
              ("kl_to_reference_k1_sum_nats", "KL to the SFT model\n(nats per response, k1 summed)")]
    for i, (label, run) in enumerate(runs.items()):
        for ax, (k, name) in zip(axes, panels):
            _draw(ax, run, k, window, label, colors.get(label, f"C{i}"))
            ax.set_title(f"{name}, {window}-step mean", fontsize=10)
            ax.set_xlabel("step")
    for label, run in (live or {}).items():
        for ax, (k, _) in zip(axes, panels):
            _draw(ax, run, k, window, label, "k", ls="--", lw=1.2)
    # one legend under the panels: inside one, it would cover a run that falls there
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(fig, path)
    return fig


def beta_figure(reference: dict, beta: float, path=None):
    """The stored hacking runs nearest ``beta`` next to the no-KL and gold runs (the slider's view),
    every stored seed shown; the title gives the final numbers as mean +- sd over the seeds."""
    stored = reference.get("hacking_seeds") or reference["hacking"]
    key = min((k for k in stored if k != "gold"), key=lambda k: abs(float(k) - beta))
    # the notebook's plot draws no KL in C0, beta = 0.05 in C1 and gold in C2: any chosen beta takes C1
    colors = {"proxy, no KL": "C0", "gold reward": "C2"}
    runs = {}
    if key != "0":
        runs[f"proxy, beta = {key}"] = stored[key]
        colors[f"proxy, beta = {key}"] = "C1"
    runs["proxy, no KL"] = stored["0"]
    runs["gold reward"] = stored["gold"]
    s = seed_summary(hack_summary, stored[key])
    n = len(seed_runs(stored[key]))
    pm = (lambda k, f: f"{s[k][0]:{f}} ± {s[k][1]:{f}}") if n > 1 else (lambda k, f: f"{s[k][0]:{f}}")
    return plot_hacking(runs, path, colors=colors,
                        title=f"beta = {key}" + (f" ({n} seeds)" if n > 1 else "") +
                              f": final accuracy {pm('final_accuracy', '.2f')}, length {pm('final_length', '.2f')}, "
                              f"KL {pm('final_kl', '.1f')} nats")


def beta_widget(reference: dict | None = None):
    """A slider over the stored beta sweep redrawing accuracy, reward, length and KL curves (every
    stored seed; a beta seen before is shown again without redrawing).

    The box has attributes ``slider``, ``image`` and ``update()``.
    """
    import ipywidgets as w

    ref = reference or load_reference()
    options = [float(k) for k in ref["hacking"] if k != "gold"]
    slider = w.SelectionSlider(options=options, value=options[0], description="beta", continuous_update=False)
    image = w.Image(format="png")
    drawn: dict[float, bytes] = {}  # the stored runs do not change: each beta is drawn once

    def update(_=None):
        if slider.value not in drawn:
            drawn[slider.value] = figure_png(beta_figure(ref, slider.value))
        image.value = drawn[slider.value]

    slider.observe(update, names="value")
    update()
    box = w.VBox([slider, image])
    box.slider, box.image, box.update = slider, image, update
    return box


def plot_entropy(runs: dict, path=None, live: dict | None = None, window: int = 5):
    """Entropy, accuracy and the upper clip's rare/common shares per step for {arm: run} (a run is
    one seed or several, as in :func:`plot_hacking`: several are drawn as mean, band and seeds)."""
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
    for i, (label, run) in enumerate(runs.items()):
        _draw(axes[0], run, "entropy_token_mean_nats", window, label, f"C{i}")
        _draw(axes[1], run, "sampled_accuracy", window, label, f"C{i}")
        if label != "no upper clip":
            _draw(axes[2], run, "late_clip_high_of_positive_rare", window, f"{label}: rare tokens (p < 0.5)", f"C{i}")
            _draw(axes[2], run, "late_clip_high_of_positive_common", window, f"{label}: common tokens", f"C{i}",
                  ls="--")
    for label, run in (live or {}).items():
        _draw(axes[0], run, "entropy_token_mean_nats", window, label, "k", ls="--", lw=1.2)
    axes[0].set_title(f"entropy (nats per token), {window}-step mean", fontsize=10)
    axes[1].set_title(f"exact-match accuracy, {window}-step mean", fontsize=10)
    axes[2].set_title("upper clip: share of positive-advantage tokens\nswitched off in epochs 2-4, "
                      f"{window}-step mean", fontsize=10)
    axes[2].set_ylim(-0.03, 1.03)
    for ax in axes:
        ax.set_xlabel("step")
    # the legends go under the panels: inside, they cover a band (no upper clip's accuracy, clip-higher's share)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.02, 0.0), ncol=max(1, len(labels)), fontsize=9,
               frameon=False)
    style = [Line2D([], [], color="0.3", ls="-"), Line2D([], [], color="0.3", ls="--")]
    fig.legend(style, ["right panel: rare tokens (p < 0.5 when sampled)", "common tokens"], loc="lower right",
               bbox_to_anchor=(0.98, 0.0), ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(fig, path)
    return fig


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m llmrl.labs.lab19", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reference", help="rerun every full-length run and rewrite lab19_reference.json")
    r.add_argument("--workers", type=int, default=2, help="parallel processes (one thread each)")
    r.add_argument("--seeds", type=int, nargs="+", default=list(REFERENCE_SEEDS), help="seeds of every run")
    h = sub.add_parser("hack", help="one reward-hacking run")
    h.add_argument("--beta", type=float, default=0.0)
    h.add_argument("--reward", choices=("proxy", "gold"), default="proxy")
    h.add_argument("--length-bonus", type=float, default=0.1)
    h.add_argument("--steps", type=int, default=HACK_SETTINGS["steps"])
    h.add_argument("--advantage", default="mean")
    h.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("entropy", help="one entropy run")
    e.add_argument("--arm", choices=list(CLIP_ARMS), default="symmetric")
    e.add_argument("--epochs", type=int, default=ENTROPY_SETTINGS["epochs"])
    e.add_argument("--steps", type=int, default=ENTROPY_SETTINGS["steps"])
    e.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.cmd == "reference":
        ref = compute_reference(workers=a.workers, seeds=a.seeds)
        print(expected_report(measured(ref)))
    elif a.cmd == "hack":
        run = hacking_run(a.beta, reward=a.reward, length_bonus=a.length_bonus, steps=a.steps,
                          advantage=a.advantage, seed=a.seed)
        print(json.dumps(hack_summary(run), indent=1))
    else:
        run = entropy_run(a.arm, epochs=a.epochs, steps=a.steps, seed=a.seed)
        print(json.dumps(entropy_summary(run), indent=1))


if __name__ == "__main__":
    main()
