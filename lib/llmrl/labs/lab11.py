"""Lab 11 (the language model as a policy): experiments, plots and widgets behind the notebook.

Three experiments, each able to run on the student's own functions:

1. :func:`temperature_sweep`: accuracy and answer diversity of the SFT TinyLM as the sampling
   temperature grows (``sampler`` = the student's ``sample_with_temperature``).
2. :func:`kl_estimates`: KL(pi_T || pi_ref) per response between the model sampled at temperature T
   and the same model at T = 1, estimated with k1 and k3 on the sampled tokens, against the exact
   value summed over the whole vocabulary at every visited position (the student's
   ``response_logprobs``, ``sequence_logprob`` and ``kl_estimators``).
3. :func:`frontier_data`: the reward-KL frontier of the toy LM (:mod:`llmrl.lm.toylm`) as beta sweeps,
   against what temperature reaches (the student's ``tilted_optimum``).

:data:`EXPECTED` holds the published "what you should see"; :func:`expected_report` prints it next
to measured numbers. The widget builders (:func:`temperature_widget`, :func:`beta_widget`) sit on
pure functions (:func:`temperature_view`, :func:`beta_view`, :func:`beta_figure_png`) that the tests
call without a browser.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..lm import sampling as _sampling
from ..lm import toylm
from ..tasks.addition import PROMPT_LEN, Problems, eval_problems, is_answer, is_correct
from ..rl.losses import full_vocab_kl, kl_estimate
from ..experiments.plotting import save
from ..utils import check_float, check_int, sd_over_seeds

#: The published "what you should see" for lab11, with the tolerance each check uses and why.
EXPECTED = {
    # Experiment 1, SFT TinyLM on 2-digit + 2-digit problems.
    "greedy_accuracy": 0.80,          # "about 80%"
    "accuracy_T1": 0.55,              # "about 55%"
    "accuracy_T2_below": 0.30,        # "below 30%"
    "distinct_greedy": 1.0,           # 8 greedy samples are one answer
    "distinct_T2": 5.0,               # "climbs from 1 to about 5"
    # Experiment 2: at T > 1 k1 and k3 agree with the exact KL; at T = 0.25 k3 is far too low and
    # its error bars miss the truth.
    "kl_agree_temperatures": (1.5, 2.0),
    "kl_sharp_temperature": 0.25,
    # Experiment 3 and the worked example (beta = 1).
    "worked_pi_star": toylm.WORKED_PI_STAR,
    "worked_soft_values": toylm.WORKED_SOFT_VALUES,
    "hack_peak_kl_nats": 0.5,         # "peaks around KL = 0.5 nats"
}

SWEEP_TEMPERATURES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
KL_TEMPERATURES = (0.25, 0.5, 1.5, 2.0)
ARTIFACTS = Path("artifacts") / "lab11"

Sampler = Callable[..., torch.Tensor]


# ----------------------------------------------------------------------------------------------
# The library's own versions of the lab's task functions (used when no student function is given)

def reference_response_logprobs(logits: torch.Tensor, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """logits [B, T, V], tokens [B, T] -> [B, T - prompt_len] log-probs of the response tokens."""
    return _sampling.gather_logprobs(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:])


def reference_sequence_logprob(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, R] log-probs, [B, R] bool mask -> [B] sums over the real tokens."""
    return torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs)).sum(-1)


def reference_kl_estimators(logp: torch.Tensor, logp_ref: torch.Tensor):
    """(k1, k2, k3), each shaped like ``logp``."""
    return tuple(kl_estimate(logp, logp_ref, k) for k in ("k1", "k2", "k3"))


# ----------------------------------------------------------------------------------------------
# Generation with a custom token sampler

def _checked_sampler(sampler: Sampler) -> Sampler:
    def run(logits, temperature, generator=None):
        out = sampler(logits, temperature, generator)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"sampler must return a torch.Tensor of token ids, got {type(out).__name__}")
        if out.shape != logits.shape[:1]:
            raise ValueError(f"sampler must return shape [B] = {tuple(logits.shape[:1])}, got {tuple(out.shape)}")
        if out.dtype != torch.long:
            raise TypeError(f"sampler must return long token ids, got {out.dtype}")
        if out.numel() and (int(out.min()) < 0 or int(out.max()) >= logits.shape[-1]):
            raise ValueError("sampler returned token ids outside the vocabulary")
        return out
    return run


def generate_with_sampler(model, problems: Problems, group_size: int = 1, temperature: float = 1.0,
                          generator: torch.Generator | int | None = None,
                          sampler: Sampler | None = None) -> _sampling.Rollout:
    """:func:`llmrl.lm.sampling.generate`, each token drawn by ``sampler(logits [B, V], T, generator) -> [B]``.

    ``sampler=None`` uses the library's :func:`llmrl.lm.sampling.sample_token`.
    """
    if sampler is not None and not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    return _sampling.generate(model, problems, group_size, temperature, generator,
                              sampler=None if sampler is None else _checked_sampler(sampler))


def _distinct_per_group(responses: Sequence[str], group_size: int) -> np.ndarray:
    """Per group of ``group_size`` consecutive responses: how many different well-formed answers
    (:func:`is_answer`) it holds; malformed responses count as no answer at all."""
    return np.array([len({r for r in responses[i:i + group_size] if is_answer(r)})
                     for i in range(0, len(responses), group_size)], dtype=float)


# ----------------------------------------------------------------------------------------------
# Experiment 1: temperature trades accuracy for diversity

def temperature_sweep(model, temperatures: Sequence[float] = SWEEP_TEMPERATURES, n_problems: int = 200,
                      n_samples: int = 8, seed: int = 0, sampler: Sampler | None = None) -> dict:
    """Accuracy and diversity of ``model`` on ``n_problems`` fixed 2-digit problems at each temperature.

    Returns arrays: temperature, accuracy (share of the n_samples * n_problems samples that are
    right; T = 0 is greedy), distinct_answers (mean number of different well-formed answers among
    the ``n_samples`` per problem: :func:`is_answer`; a malformed sample is no answer).
    """
    check_int("n_problems", n_problems, minimum=1)
    check_int("n_samples", n_samples, minimum=1)
    check_int("seed", seed, minimum=0)
    temps = [check_float("temperature", t, minimum=0.0) for t in temperatures]
    problems = eval_problems(n_problems)
    acc, distinct = [], []
    for i, T in enumerate(temps):
        r = generate_with_sampler(model, problems, n_samples, T, seed + i, sampler)
        acc.append(float(is_correct(r.responses, r.answers).float().mean()))
        distinct.append(float(_distinct_per_group(r.responses, n_samples).mean()))
    return {"temperature": np.array(temps), "accuracy": np.array(acc), "distinct_answers": np.array(distinct),
            "n_problems": n_problems, "n_samples": n_samples}


def temperature_sweep_seeds(model, temperatures: Sequence[float] = SWEEP_TEMPERATURES,
                            seeds: Sequence[int] = (0, 1, 2), **kwargs) -> dict:
    """:func:`temperature_sweep` once per seed (``temperature_sweep(..., seed=s)``, the samples of
    each seed its own). ``accuracy`` and ``distinct_answers`` are the means over the seeds, so the
    result reads like one sweep; ``accuracy_seeds`` and ``distinct_seeds`` ``[len(seeds), len(T)]``
    hold every seed's values, ``*_std`` their standard deviation over seeds, ``seeds`` the seeds."""
    seeds = [check_int("seed", s, minimum=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    runs = [temperature_sweep(model, temperatures, seed=s, **kwargs) for s in seeds]
    acc = np.stack([r["accuracy"] for r in runs])
    distinct = np.stack([r["distinct_answers"] for r in runs])
    return {"temperature": runs[0]["temperature"], "accuracy": acc.mean(0), "distinct_answers": distinct.mean(0),
            "accuracy_std": sd_over_seeds(acc), "distinct_std": sd_over_seeds(distinct), "accuracy_seeds": acc,
            "distinct_seeds": distinct, "seeds": seeds, "n_problems": runs[0]["n_problems"],
            "n_samples": runs[0]["n_samples"]}


def sweep_value(sweep: dict, key: str, temperature: float) -> float:
    """The value of ``sweep[key]`` at one temperature of the sweep."""
    idx = np.flatnonzero(np.isclose(sweep["temperature"], temperature))
    if idx.size == 0:
        raise ValueError(f"temperature {temperature} is not in the sweep {sweep['temperature']}")
    return float(sweep[key][idx[0]])


# ----------------------------------------------------------------------------------------------
# Experiment 2: k1 and k3 against the exact KL

def _check_estimates(k, like: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(k, torch.Tensor) or k.shape != like.shape:
        raise ValueError(f"{name} must be a tensor of shape {tuple(like.shape)}, got "
                         f"{type(k).__name__} {tuple(getattr(k, 'shape', ()))}")
    return k


@torch.no_grad()
def kl_estimates(model, temperatures: Sequence[float] = KL_TEMPERATURES, n_problems: int = 16,
                 n_samples: int = 8, n_batches: int = 16, seed: int = 0, sampler: Sampler | None = None,
                 response_logprobs_fn=None, sequence_logprob_fn=None, kl_estimators_fn=None,
                 z: float = 1.96) -> dict:
    """KL(pi_T || pi_ref) per response, pi_T = ``model`` at temperature T, pi_ref = ``model`` at T = 1.

    For each T > 0, ``n_batches`` batches of ``n_problems`` prompts x ``n_samples`` responses (the
    defaults, 16 x 8, are one RL step's batch) are drawn from pi_T. With l = log pi_T - log pi_ref
    on each sampled token, k1, k2 and k3 are summed over the real tokens of each response and
    averaged over a batch, with an error bar of ``z`` standard errors. The truth, ``exact``, sums
    the full-vocabulary KL at every visited position (nothing sampled at that position) and is
    averaged over all batches.

    Returns, per temperature: ``exact`` and ``exact_err`` [n_T]; for k in k1, k2, k3: ``k`` (mean
    over all batches) [n_T], ``k_batches`` and ``k_batches_err`` [n_T, n_batches] (each batch's
    estimate and error bar); plus ``per_response`` (a list of {name: [n_batches * n_problems *
    n_samples]} arrays).

    The task functions default to the library's; pass the student's:
    ``response_logprobs_fn(logits [B, T, V], tokens [B, T], prompt_len) -> [B, R]``,
    ``sequence_logprob_fn([B, R], mask [B, R]) -> [B]``, ``kl_estimators_fn(logp, logp_ref) -> (k1, k2, k3)``.
    """
    check_int("n_problems", n_problems, minimum=1)
    check_int("n_samples", n_samples, minimum=1)
    check_int("n_batches", n_batches, minimum=1)
    check_int("seed", seed, minimum=0)
    if n_problems * n_samples < 2:
        raise ValueError("n_problems * n_samples must be >= 2 to estimate a standard error")
    z = check_float("z", z, minimum=0.0)
    temps = [check_float("temperature", t) for t in temperatures]
    if any(t <= 0 for t in temps):
        raise ValueError(f"temperatures must be > 0 (log pi_T is undefined at T = 0), got {temps}")
    lp_fn = response_logprobs_fn or reference_response_logprobs
    seq_fn = sequence_logprob_fn or reference_sequence_logprob
    k_fn = kl_estimators_fn or reference_kl_estimators
    problems = eval_problems(n_problems * n_batches)
    per_batch = n_problems * n_samples
    was_training = model.training
    model.eval()
    names = ("exact", "k1", "k2", "k3")
    out = {key: [] for n in names for key in (n, n + "_err", n + "_batches", n + "_batches_err")}
    per_response = []
    try:
        for i, T in enumerate(temps):
            r = generate_with_sampler(model, problems, n_samples, T, seed + i, sampler)
            logits = model(r.tokens)  # [B, T, V]
            lp_ref = lp_fn(logits, r.tokens, PROMPT_LEN)
            lp_T = lp_fn(logits / T, r.tokens, PROMPT_LEN)
            mask = r.response_mask
            _check_estimates(lp_T, mask.float(), "response_logprobs_fn's output")
            ks = k_fn(lp_T, lp_ref)
            if not isinstance(ks, (tuple, list)) or len(ks) != 3:
                raise ValueError("kl_estimators_fn must return a tuple (k1, k2, k3)")
            resp_logits = logits[:, PROMPT_LEN - 1:-1]
            values = {"exact": seq_fn(full_vocab_kl(resp_logits / T, resp_logits), mask)}
            for name, k in zip(("k1", "k2", "k3"), ks):
                values[name] = seq_fn(_check_estimates(k, mask.float(), name), mask)
            values = {k: v.double().numpy() for k, v in values.items()}
            per_response.append(values)
            for name, v in values.items():
                out[name].append(float(v.mean()))
                out[name + "_err"].append(float(z * v.std(ddof=1) / math.sqrt(v.size)))
                b = v.reshape(n_batches, per_batch)
                out[name + "_batches"].append(b.mean(1))
                sd = b.std(1, ddof=1) if per_batch > 1 else np.zeros(n_batches)
                out[name + "_batches_err"].append(z * sd / math.sqrt(per_batch))
    finally:
        model.train(was_training)
    res = {k: np.array(v) for k, v in out.items()}
    res.update(temperature=np.array(temps), per_response=per_response, z=z, n_batches=n_batches,
               batch_size=per_batch)
    return res


def kl_checks(kl: dict) -> dict:
    """What experiment 2 should show, per temperature: for k1 and k3, the median over batches of
    estimate / exact (``*_ratio``), the share of batches whose error bar covers the exact value
    (``*_covers``), and estimate / exact pooled over all batches (``*_pooled_ratio``)."""
    rows = {}
    for i, T in enumerate(kl["temperature"]):
        ex = float(kl["exact"][i])
        row = {"exact": ex}
        for k in ("k1", "k2", "k3"):
            est, err = kl[k + "_batches"][i], kl[k + "_batches_err"][i]
            row[k + "_ratio"] = float(np.median(est) / ex)
            row[k + "_covers"] = float(np.mean(np.abs(est - ex) <= err))
            row[k + "_pooled_ratio"] = float(kl[k][i] / ex)
        rows[float(T)] = row
    return rows


# ----------------------------------------------------------------------------------------------
# Experiment 3: the reward-KL frontier of the toy LM

def frontier_data(optimum_fn: toylm.OptimumFn | None = None, betas: Sequence[float] | None = None,
                  temperatures: Sequence[float] | None = None, scenarios: Sequence[str] = toylm.SCENARIOS) -> dict:
    """{scenario: {"toy", "optimum" (frontier of pi* over betas), "temperature" (curve), "peak"}}.

    ``optimum_fn(ref_probs, rewards, beta) -> pi*`` is the student's ``tilted_optimum`` (default:
    the library's). ``peak`` is where the true reward of pi* is highest on the beta grid.
    """
    betas = toylm.default_betas(100, 1000.0, 0.02) if betas is None else betas
    out = {}
    for name in scenarios:
        toy = toylm.scenario(name)
        front = toylm.frontier(toy, betas, optimum_fn)
        i = int(np.argmax(front["true_reward"]))
        out[name] = {"toy": toy, "optimum": front, "temperature": toylm.temperature_curve(toy, temperatures),
                     "peak": {k: float(front[k][i]) for k in ("beta", "kl_nats", "reward", "true_reward")}}
    return out


def temperature_gap(data: dict, name: str) -> np.ndarray:
    """For each temperature of ``data[name]`` whose KL the frontier covers: frontier reward minus the
    tempered policy's reward at the same KL (>= 0 when temperature stays below the frontier)."""
    front, temp = data[name]["optimum"], data[name]["temperature"]
    inside = (temp["kl_nats"] >= front["kl_nats"].min()) & (temp["kl_nats"] <= front["kl_nats"].max())
    return toylm.frontier_reward_at(front, temp["kl_nats"][inside]) - temp["reward"][inside]


def frontier_readings(data: dict) -> dict:
    """The numbers Experiment 3's reading rests on, per scenario: the tempered policy's reward at T = 1
    and at the coldest temperature of its curve (``cold_T``); pi*'s reward and true reward at the
    true reward's peak and at the smallest beta of the sweep (with their KLs)."""
    out = {}
    for name, d in data.items():
        temp, front = d["temperature"], d["optimum"]
        one = int(np.argmin(np.abs(temp["temperature"] - 1.0)))
        cold = int(np.argmin(temp["temperature"]))
        last = int(np.argmin(front["beta"]))
        out[name] = {"reward_T1": float(temp["reward"][one]), "cold_T": float(temp["temperature"][cold]),
                     "reward_cold": float(temp["reward"][cold]), "peak": dict(d["peak"]),
                     "smallest_beta": {"beta": float(front["beta"][last]), "kl_nats": float(front["kl_nats"][last]),
                                       "reward": float(front["reward"][last]),
                                       "true_reward": float(front["true_reward"][last])}}
    return out


# ----------------------------------------------------------------------------------------------
# What you should see

def measured(sweep: dict | None = None, kl: dict | None = None, front: dict | None = None) -> dict:
    """The numbers of :data:`EXPECTED` measured from the experiments' results (those given)."""
    m = {}
    if sweep is not None:
        for key, T, col in (("greedy_accuracy", 0.0, "accuracy"), ("accuracy_T1", 1.0, "accuracy"),
                            ("accuracy_T2_below", 2.0, "accuracy"), ("distinct_greedy", 0.0, "distinct_answers"),
                            ("distinct_T2", 2.0, "distinct_answers")):
            with contextlib.suppress(ValueError):
                m[key] = sweep_value(sweep, col, T)
    if kl is not None:
        checks = kl_checks(kl)
        sharp = EXPECTED["kl_sharp_temperature"]
        if sharp in checks:
            m["k3/exact at T=0.25 (median batch)"] = checks[sharp]["k3_ratio"]
            m["k3 bars cover truth at T=0.25 (share)"] = checks[sharp]["k3_covers"]
        for T in EXPECTED["kl_agree_temperatures"]:
            if T in checks:
                m[f"k1, k3 / exact at T={T:g} (median)"] = (checks[T]["k1_ratio"], checks[T]["k3_ratio"])
                m[f"k1, k3 bars cover truth at T={T:g}"] = (checks[T]["k1_covers"], checks[T]["k3_covers"])
    if front is not None and "hack" in front:
        m["hack_peak_kl_nats"] = front["hack"]["peak"]["kl_nats"]
    return m


def expected_report(sweep: dict | None = None, kl: dict | None = None, front: dict | None = None) -> str:
    """A small table: the published result next to what was measured."""
    want = {
        "greedy_accuracy": "about 0.80", "accuracy_T1": "about 0.55", "accuracy_T2_below": "below 0.30",
        "distinct_greedy": "1", "distinct_T2": "about 5",
        "k3/exact at T=0.25 (median batch)": "far below 1", "k3 bars cover truth at T=0.25 (share)": "bars miss",
        "hack_peak_kl_nats": "about 0.5",
    }
    for T in EXPECTED["kl_agree_temperatures"]:
        want[f"k1, k3 / exact at T={T:g} (median)"] = "both about 1"
        want[f"k1, k3 bars cover truth at T={T:g}"] = "agree"
    lines = [f"{'quantity':40s} {'published':>12s}   measured"]
    for key, value in measured(sweep, kl, front).items():
        if isinstance(value, tuple):
            shown = ", ".join(f"{v:.2f}" for v in value)
        elif isinstance(value, bool):
            shown = str(value)
        else:
            shown = f"{value:.3f}"
        lines.append(f"{key:40s} {want.get(key, ''):>12s}   {shown}")
    return "\n".join(lines)


def summary_line(sweep: dict, kl: dict, front: dict) -> str:
    """One line with the headline number of each experiment."""
    c = kl_checks(kl)
    sharp = EXPECTED["kl_sharp_temperature"]
    k3 = f"k3/exact {c[sharp]['k3_ratio']:.2f} at T={sharp:g}" if sharp in c else "T=0.25 not run"
    return (f"accuracy greedy {sweep_value(sweep, 'accuracy', 0.0):.2f}, T=1 {sweep_value(sweep, 'accuracy', 1.0):.2f}, "
            f"T=2 {sweep_value(sweep, 'accuracy', 2.0):.2f}; distinct/8 at T=2 "
            f"{sweep_value(sweep, 'distinct_answers', 2.0):.1f} | {k3} | "
            f"hack: true reward of pi* peaks at KL {front['hack']['peak']['kl_nats']:.2f} nats")


# ----------------------------------------------------------------------------------------------
# Plots

def plot_temperature_sweep(sweep: dict, path=ARTIFACTS / "temperature_sweep.png"):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    T = sweep["temperature"]
    seeds = sweep.get("seeds", [])
    for j, s in enumerate(seeds if len(seeds) > 1 else []):  # every seed, thin, under the mean
        ax.plot(T, sweep["accuracy_seeds"][j], "-", color="C0", lw=0.8, alpha=0.45,
                label=f"accuracy, each of seeds {', '.join(map(str, seeds))}" if j == 0 else None)
    ax.plot(T, sweep["accuracy"], "o-", color="C0", label="accuracy" + (", mean" if len(seeds) > 1 else ""))
    ax.set_xlabel("temperature T (0 = greedy)")
    ax.set_ylabel("accuracy", color="C0")
    ax.set_ylim(0, 1)
    ax2 = ax.twinx()
    for j in range(len(seeds) if len(seeds) > 1 else 0):
        ax2.plot(T, sweep["distinct_seeds"][j], "--", color="C1", lw=0.8, alpha=0.45,
                 label="distinct answers, each seed" if j == 0 else None)
    ax2.plot(T, sweep["distinct_answers"], "s--", color="C1",
             label="distinct answers" + (", mean" if len(seeds) > 1 else ""))
    ax2.set_ylabel(f"distinct answers among {sweep['n_samples']}", color="C1")
    ax2.set_ylim(0, sweep["n_samples"] + 0.5)
    ax.set_title("Temperature trades accuracy for diversity (SFT TinyLM"
                 + (f", {len(seeds)} seeds)" if len(seeds) > 1 else ")"))
    lines = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(lines[0][0] + lines[1][0], lines[0][1] + lines[1][1], fontsize=7, loc="center left")
    fig.tight_layout()
    save(fig, path)
    return fig


def plot_kl_estimates(kl: dict, path=ARTIFACTS / "kl_estimates.png", top: float = 3.0):
    """Each batch's k1 and k3 estimate divided by the exact KL, with its error bar, per temperature.

    The dashed line at 1 is the truth. Estimates above ``top`` are drawn at ``top`` as triangles.
    """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    T = kl["temperature"]
    nb = kl["n_batches"]
    jitter = np.linspace(-0.12, 0.12, nb) if nb > 1 else np.zeros(1)
    for j, (k, color, dx) in enumerate((("k1", "C0", -0.2), ("k3", "C3", 0.2))):
        for i in range(len(T)):
            ex = kl["exact"][i]
            est, err = kl[k + "_batches"][i] / ex, kl[k + "_batches_err"][i] / ex
            x = i + dx + jitter
            inside = est <= top
            ax.errorbar(x[inside], est[inside], yerr=err[inside], fmt="o", ms=3, color=color, alpha=0.55,
                        elinewidth=1, label=f"{k}, one batch each" if i == 0 else None)
            ax.plot(x[~inside], np.full((~inside).sum(), top), "^", color=color, ms=6)
            ax.plot([i + dx - 0.16, i + dx + 0.16], [np.median(est)] * 2, "-", color=color, lw=2.5,
                    label=f"{k}, median batch" if i == 0 else None)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="exact KL (full-vocabulary sum)")
    ax.set_xticks(np.arange(len(T)), [f"T = {t:g}\n(KL {e:.2f})" for t, e in zip(T, kl["exact"])])
    ax.set_ylim(0, top * 1.05)
    ax.set_ylabel("estimate / exact KL per response")
    ax.set_title(rf"KL($\pi_T\,\|\,${PI_REF}) from batches of {kl['batch_size']} responses "
                 f"(bars: {kl['z']:g} s.e.)", fontsize=10)
    # below the axes: inside, it would cover the T = 0.25 batches whose k3 shoots up
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    fig.tight_layout()
    save(fig, path)
    return fig


PI_STAR, PI_REF = r"$\pi^*$", r"$\pi_{\mathrm{ref}}$"
#: What each toy-LM scenario is, for a plot's title (the scenarios: :mod:`llmrl.lm.toylm`).
SCENARIO_TITLES = {
    "worked": 'scenario "worked": the reward is the true one\n(the likeliest response, ax, earns 0)',
    "hack": 'scenario "hack": a proxy reward that overrates\nthe rare response bz (dashed: the true reward)',
}


def plot_frontier(front: dict, path=ARTIFACTS / "frontier.png"):
    """The reward-KL frontier of each toy-LM scenario: pi* as beta falls against tempering pi_ref
    (and, where the reward is a proxy, pi*'s true reward), one panel per scenario."""
    import matplotlib.pyplot as plt
    names = list(front)
    fig, axes = plt.subplots(1, len(names), figsize=(5.4 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        d = front[name]
        opt, tmp = d["optimum"], d["temperature"]
        ax.plot(opt["kl_nats"], opt["reward"], "-", color="C0", label=rf"{PI_STAR} as $\beta$ falls")
        lo, hi = tmp["temperature"] < 1, tmp["temperature"] > 1
        ax.plot(tmp["kl_nats"][lo], tmp["reward"][lo], ":", color="C3", lw=2, label="temperature T < 1")
        ax.plot(tmp["kl_nats"][hi], tmp["reward"][hi], ":", color="C2", lw=2, label="temperature T > 1")
        if not np.allclose(d["toy"].rewards, d["toy"].true_rewards):
            ax.plot(opt["kl_nats"], opt["true_reward"], "--", color="C1", label=f"true reward of {PI_STAR}")
            ax.axvline(d["peak"]["kl_nats"], color="C1", lw=0.8, alpha=0.6)
            ax.annotate(f"true reward peaks\nat KL {d['peak']['kl_nats']:.2f}", (d["peak"]["kl_nats"], d["peak"]["true_reward"]),
                        xytext=(8, -32), textcoords="offset points", fontsize=8, color="C1")
        ax.plot([0], [d["toy"].ref_probs @ d["toy"].reward_vector], "ko", label=PI_REF)
        ax.set_xlabel(rf"KL($\pi\,\|\,${PI_REF}), nats")
        ax.set_ylabel("expected reward (the reward optimised)")
        ax.set_title(SCENARIO_TITLES.get(name, f'toy LM, scenario "{name}"'), fontsize=10)
        ax.set_xlim(0, min(3.0, float(opt["kl_nats"].max()) * 1.05))
        ax.set_ylim(-0.05, float(max(opt["reward"].max(), tmp["reward"].max())) * 1.35)  # room for the legend
        ax.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    save(fig, path)
    return fig


# ----------------------------------------------------------------------------------------------
# Widgets: pure views first, then the ipywidgets builders on top

def temperature_view(model, temperature: float, problems: Problems | None = None, n_samples: int = 8,
                     n_show: int = 4, seed: int = 0, sampler: Sampler | None = None) -> dict:
    """Everything the temperature slider shows at one T: accuracy, mean distinct well-formed answers
    among ``n_samples`` (:func:`is_answer`), and the samples of the first ``n_show`` problems."""
    temperature = check_float("temperature", temperature, minimum=0.0)
    check_int("n_samples", n_samples, minimum=1)
    check_int("n_show", n_show, minimum=0)
    problems = eval_problems(100) if problems is None else problems
    r = generate_with_sampler(model, problems, n_samples, temperature, seed, sampler)
    right = is_correct(r.responses, r.answers)
    show = []
    for i in range(min(n_show, len(problems))):
        rows = slice(i * n_samples, (i + 1) * n_samples)
        show.append({"prompt": problems.texts()[i], "answer": problems.answers[i],
                     "samples": r.responses[rows], "correct": right[rows].tolist()})
    return {"temperature": temperature, "accuracy": float(right.float().mean()),
            "distinct_answers": float(_distinct_per_group(r.responses, n_samples).mean()),
            "n_samples": n_samples, "shown": show}


def format_temperature_view(view: dict) -> str:
    """HTML for :func:`temperature_view`: the two numbers and the samples (wrong ones in red)."""
    head = (f"<b>T = {view['temperature']:.2f}</b>: accuracy {view['accuracy']:.1%}, "
            f"{view['distinct_answers']:.2f} distinct answers among {view['n_samples']} samples")
    rows = []
    for s in view["shown"]:
        cells = " ".join(f"<span style='color:{'green' if ok else 'crimson'}'>{txt or '(empty)'}</span>"
                         for txt, ok in zip(s["samples"], s["correct"]))
        rows.append(f"<tt>{s['prompt']}</tt> (right: {s['answer']}) &rarr; {cells}")
    return head + "<br>" + "<br>".join(rows)


def temperature_widget(model, problems: Problems | None = None, n_samples: int = 8, seed: int = 0,
                       sampler: Sampler | None = None, temperature: float = 1.0):
    """A temperature slider over the SFT TinyLM: accuracy, diversity and live samples."""
    import ipywidgets as w
    problems = eval_problems(100) if problems is None else problems
    slider = w.FloatSlider(value=temperature, min=0.0, max=3.0, step=0.05, description="T",
                           continuous_update=False, readout_format=".2f")
    html = w.HTML()

    def update(_=None):
        html.value = format_temperature_view(temperature_view(model, slider.value, problems, n_samples,
                                                              4, seed, sampler))
    slider.observe(update, names="value")
    update()
    box = w.VBox([slider, html])
    box.slider, box.html, box.update = slider, html, update
    return box


def beta_view(toy: toylm.ToyLM | str, beta: float, optimum_fn: toylm.OptimumFn | None = None) -> dict:
    """pi* of the toy LM at one beta: the policy, its reward, true reward and KL to pi_ref."""
    toy = toylm.scenario(toy) if isinstance(toy, str) else toy
    front = toylm.frontier(toy, [beta], optimum_fn)
    return {"beta": float(front["beta"][0]), "responses": toy.responses, "ref_probs": toy.ref_probs,
            "policy": front["policies"][0], "reward": float(front["reward"][0]),
            "true_reward": float(front["true_reward"][0]), "kl_nats": float(front["kl_nats"][0]),
            "objective": float(front["reward"][0] - front["beta"][0] * front["kl_nats"][0])}


def beta_figure_png(toy: toylm.ToyLM | str, beta: float, front: dict | None = None,
                    optimum_fn: toylm.OptimumFn | None = None) -> bytes:
    """PNG bytes: pi* next to pi_ref as bars, and the point (KL, reward) on the frontier."""
    import matplotlib
    from matplotlib.figure import Figure
    toy = toylm.scenario(toy) if isinstance(toy, str) else toy
    view = beta_view(toy, beta, optimum_fn)
    front = toylm.frontier(toy, toylm.default_betas(60, 1000.0, 0.02), optimum_fn) if front is None else front
    fig = Figure(figsize=(8.5, 3.0))
    a1, a2 = fig.subplots(1, 2)
    x = np.arange(len(view["responses"]))
    a1.bar(x - 0.2, view["ref_probs"], 0.4, color="0.7", label=PI_REF)
    a1.bar(x + 0.2, view["policy"], 0.4, color="C0", label=rf"{PI_STAR}, $\beta$ = {view['beta']:.3g}")
    a1.set_xticks(x, view["responses"])
    a1.set_ylim(0, 1)
    a1.set_ylabel("probability")
    a1.legend(fontsize=8)
    a2.plot(front["kl_nats"], front["reward"], "-", color="C0", label="frontier (reward)")
    if not np.allclose(toy.rewards, toy.true_rewards):
        a2.plot(front["kl_nats"], front["true_reward"], "--", color="C1", label="true reward")
        a2.plot([view["kl_nats"]], [view["true_reward"]], "o", color="C1")
    a2.plot([view["kl_nats"]], [view["reward"]], "o", color="C0", markersize=8)
    a2.set_xlim(0, min(3.0, float(front["kl_nats"].max()) * 1.05))
    a2.set_xlabel(rf"KL({PI_STAR}$\,\|\,${PI_REF}), nats")
    a2.set_ylabel("expected reward")
    a2.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    with matplotlib.rc_context({"savefig.dpi": 80}):
        fig.savefig(buf, format="png")
    return buf.getvalue()


def format_beta_view(view: dict) -> str:
    parts = [f"<b>beta = {view['beta']:.3g}</b>: reward {view['reward']:.3f}",
             f"KL(pi* || pi_ref) {view['kl_nats']:.3f} nats",
             f"J = reward - beta KL = {view['objective']:.3f}"]
    if not math.isclose(view["reward"], view["true_reward"]):
        parts.insert(1, f"true reward {view['true_reward']:.3f}")
    return ", ".join(parts)


def beta_widget(toy: toylm.ToyLM | str = "worked", optimum_fn: toylm.OptimumFn | None = None, beta: float = 1.0):
    """A beta slider (log scale) over the toy LM: pi* as bars, its reward and KL, and its point on
    the reward-KL frontier."""
    import ipywidgets as w
    toy = toylm.scenario(toy) if isinstance(toy, str) else toy
    front = toylm.frontier(toy, toylm.default_betas(60, 1000.0, 0.02), optimum_fn)
    slider = w.FloatLogSlider(value=beta, base=10, min=-2, max=1.5, step=0.05, description="beta",
                              continuous_update=True, readout_format=".3g")
    html = w.HTML()
    image = w.Image(format="png")

    def update(_=None):
        html.value = format_beta_view(beta_view(toy, slider.value, optimum_fn))
        image.value = beta_figure_png(toy, slider.value, front, optimum_fn)
    slider.observe(update, names="value")
    update()
    box = w.VBox([slider, html, image])
    box.slider, box.html, box.image, box.update = slider, html, image, update
    return box


__all__ = [
    "EXPECTED", "SWEEP_TEMPERATURES", "KL_TEMPERATURES", "generate_with_sampler", "temperature_sweep",
    "temperature_sweep_seeds", "sweep_value", "frontier_readings", "kl_estimates", "kl_checks", "frontier_data", "temperature_gap", "measured",
    "expected_report", "summary_line", "plot_temperature_sweep", "plot_kl_estimates", "plot_frontier",
    "temperature_view", "format_temperature_view", "temperature_widget", "beta_view", "beta_figure_png",
    "format_beta_view", "beta_widget", "reference_response_logprobs", "reference_sequence_logprob",
    "reference_kl_estimators",
]
