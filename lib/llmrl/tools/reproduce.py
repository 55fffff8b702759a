"""Reproduce the published results of the four assignments, with seeds: ``make reproduce``.

Every "what you should see" / "what we observed" statement of the material the course was built
from (lab11, lab19, lab21, hw4) is a :class:`Claim` in :data:`CLAIMS`: an id, the lab, the
statement in the course's words, the published value, a :class:`Check` (the tolerance, with its
reason), what the run would have to do for it to fail, and a function that computes our value from
one seed's experiment results. :func:`coincidences` finds claims whose per-seed values move together
exactly (one measure counted twice) unless a claim declares the other. Claims read
the results of :data:`EXPERIMENTS`; each experiment is computed once per seed and shared by every
claim that reads it, and each (experiment, seed) result is cached as JSON under
``artifacts/reproduce/`` (:func:`cache_dir`), so a rerun of the report only computes what is
missing. The cache key is the experiment's settings, the fingerprints of the models it starts
from and the torch version; library code is not in the key (every result records the library's
source fingerprint, and the report marks results computed by other code: rerun with ``--fresh``).

Command line::

    python -m llmrl.tools.reproduce                     # every claim, seeds 0,1,2 -> docs/reproduction.md
    python -m llmrl.tools.reproduce --fast              # the claims on cheap experiments only (~1 minute)
    python -m llmrl.tools.reproduce --only lab19 --seeds 0,1,2,3,4
    python -m llmrl.tools.reproduce --report-only       # rewrite the report from the cache, run nothing

A claim's verdict: ``holds`` (a qualitative claim true of the mean over seeds, or an exact value
within its rounding), ``within about`` (a number within the published "about"), ``differs`` (with
the reason when known), ``not run`` (its experiment was not run or cannot run here).

Seeds: every experiment takes a list of seeds. The runner-based ones (lab19's parts 2-3, lab21's
projects) hand the list to :func:`llmrl.experiments.runner.run_arms`, whose arm functions train an arm's seeds
as one stacked computation; :func:`per_seed` is the one loop over seeds for the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..utils import mean_sd, repo_root
from .claim_measures import measures
from .claims import Check, Claim, above, below, between, load as load_claims, near  # noqa: F401  (the names tests and tools use)
# the experiments (what runs, per seed) live in reproduce_experiments.py; tests and tools reach them here too
from .reproduce_experiments import (  # noqa: F401
    EXPERIMENTS, LAB21_ARMS, NOTEBOOK_SEEDS, SMOKE_STEPS, Experiment, Options, _experiments, _tiny, per_seed)

CACHE_VERSION = 1
DEFAULT_SEEDS = (0, 1, 2)
LABS = ("lab11", "lab19", "lab21", "hw4")


def cache_dir() -> Path:
    """``$LLMRL_REPRODUCE_CACHE``, else ``artifacts/reproduce`` at the repository root (else here)."""
    env = os.environ.get("LLMRL_REPRODUCE_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "artifacts" / "reproduce"


def default_report_path() -> Path:
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "docs" / "reproduction.md"


# ============================================================================ claims (data: claims.json)

# The claims are data (claims.json, read and checked by llmrl.tools.claims); how each one is measured is
# code (llmrl.tools.claim_measures, by claim id).




CLAIMS: list[Claim] = load_claims(measures(), labs=LABS, experiments=EXPERIMENTS)


# ============================================================================ running and caching

def model_fingerprint(name: str) -> str:
    """A short hash of a model's weights: TinyLM checkpoints by name, ``hw4-charlm`` for hw4's model."""
    import torch

    if name == "hw4-charlm":
        from ..hw4.charlm import load_base_model
        model = load_base_model(progress=False)
    else:
        model = _tiny(name)
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes() if isinstance(v, torch.Tensor) else repr(v).encode())
    return h.hexdigest()[:16]


def code_fingerprint() -> str:
    """A short hash of the library's sources (this module excluded)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parents[1]  # the whole package (llmrl/)
    for f in sorted(here.rglob("*.py")):
        if f.name != "reproduce.py":
            h.update(str(f.relative_to(here)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _key(exp: Experiment, models: dict[str, str], opts: Options = Options()) -> str:
    import torch
    blob = json.dumps({"v": CACHE_VERSION, "name": exp.name, "settings": exp.settings, "torch": torch.__version__,
                       "smoke": opts.smoke,
                       "models": {m: models[m] for m in exp.models}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cache_path(exp: Experiment, seed: int, root: Path) -> Path:
    return root / exp.name / (f"seed{seed}.json" if exp.seeded else "deterministic.json")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return None if math.isnan(x) else x
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


def _run_seeds(exp: Experiment, seeds: Sequence[int], opts: Options) -> dict[int, dict]:
    """Every seed of ``seeds`` in one call of the experiment (see :func:`per_seed`)."""
    got = exp.run(list(seeds), opts)
    missing = [s for s in seeds if s not in got]
    if missing:
        raise RuntimeError(f"experiment {exp.name} returned no result for seed(s) {missing}")
    return got


def compute(exp: Experiment, seeds: Sequence[int], *, root: Path | None = None, fresh: bool = False,
            cached_only: bool = False, models: dict[str, str] | None = None, opts: Options = Options(),
            log=print) -> dict[int, dict]:
    """{seed: cached blob} of ``exp`` (the result under ``"result"``), read from the cache where
    present with the same key, else computed and stored. A deterministic experiment is computed
    once and returned for every seed. ``cached_only``: compute nothing."""
    root = cache_dir() if root is None else Path(root)
    if opts.smoke:
        root = root / "smoke"
    if exp.unavailable or exp.run is None:
        return {}
    models = models if models is not None else {m: model_fingerprint(m) for m in exp.models}
    key = _key(exp, models, opts)
    wanted = list(seeds) if exp.seeded else [seeds[0]]
    out, missing = {}, []
    for s in wanted:
        path = _cache_path(exp, s, root)
        if not fresh and path.exists():
            try:
                blob = json.loads(path.read_text())
            except json.JSONDecodeError:
                blob = {}
            if blob.get("key") == key:
                out[s] = blob
                continue
        missing.append(s)
    if missing and not cached_only:
        t0 = time.time()
        log(f"[reproduce] {exp.name}: computing seed(s) {missing}")
        results = _run_seeds(exp, missing, opts)
        dt = (time.time() - t0) / max(1, len(missing))
        for s in missing:
            blob = {"key": key, "experiment": exp.name, "seed": s if exp.seeded else None, "models": models,
                    "code": code_fingerprint(), "seconds": round(dt, 1),
                    "computed": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "result": _jsonable(results[s])}
            path = _cache_path(exp, s, root)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(blob))
            os.replace(tmp, path)
            out[s] = blob
        log(f"[reproduce] {exp.name}: {dt:.1f} s per seed")
    if not exp.seeded and out:
        only = next(iter(out.values()))
        return {s: only for s in seeds}
    return out


# ============================================================================ judging

@dataclass
class Outcome:
    claim: Claim
    values: dict[int, float]       # seed -> our value
    verdict: str
    mean: float = float("nan")
    spread: float = float("nan")
    seeds_passing: int = 0
    deterministic: bool = False
    note: str = ""


def judge(claim: Claim, per_seed: dict[int, dict], deterministic: bool = False, unavailable: str = "") -> Outcome:
    """Apply ``claim`` to ``per_seed`` = {seed: {experiment: result}} (seeds lacking one of its
    experiments are left out)."""
    if unavailable:
        return Outcome(claim, {}, "not run", note=unavailable)
    vals = {}
    for s, res in sorted(per_seed.items()):
        if all(e in res for e in claim.experiments):
            v = claim.measure(res)
            vals[s] = float("nan") if v is None else float(v)
    if not vals:
        return Outcome(claim, {}, "not run", note="its experiment was not run")
    if claim.seedless:  # the seed cannot change it: one value (the first seed's)
        first = next(iter(vals))
        vals, deterministic = {first: vals[first]}, True
    arr = np.array(list(vals.values()), dtype=float)
    finite = arr[np.isfinite(arr)]
    mean, spread = mean_sd(finite) if finite.size else (float("nan"), 0.0)
    spread = 0.0 if deterministic else spread
    passing = int(sum(claim.check.passes(v) for v in arr))
    if claim.min_seeds is not None and not deterministic:
        passes = passing >= seeds_needed(claim, len(arr))
    else:
        passes = claim.check.passes(mean)
    verdict = ("within about" if claim.check.about else "holds") if passes else "differs"
    note = "" if passes else claim.known
    return Outcome(claim, vals, verdict, mean, spread, passing, deterministic, note)


def seeds_needed(claim: Claim, n: int) -> int:
    """How many of ``n`` seeds must pass a claim with ``min_seeds`` (at least one)."""
    return max(1, math.ceil(claim.min_seeds * n - 1e-9))


def judge_all(claims: Sequence[Claim], per_seed: dict[int, dict], skipped: dict[str, str] | None = None) -> list[Outcome]:
    """Judge every claim on {seed: {experiment: result}} (claims whose experiments are missing: "not run";
    ``skipped`` = {experiment: why} gives the reason)."""
    skipped = skipped or {}
    out = []
    for c in claims:
        una = next((EXPERIMENTS[e].unavailable or skipped.get(e, "") for e in c.experiments
                    if EXPERIMENTS[e].unavailable or e in skipped), "")
        det = all(not EXPERIMENTS[e].seeded for e in c.experiments)
        out.append(judge(c, per_seed, det, una))
    return out


@dataclass(frozen=True)
class Coincidence:
    """Two claims on a shared experiment whose per-seed values move together exactly: ``how`` is "the same
    values", "the same values plus a constant" or "a constant minus the values" (the last two only where the
    values change from seed to seed). ``declared``: the why of a claim's ``same_values`` naming the other."""

    first: Claim
    second: Claim
    how: str
    declared: str = ""


_SAME = 1e-9  # float noise: measures computed the same way agree far closer than any two seeds' values


def coincidences(outcomes: Sequence[Outcome]) -> list[Coincidence]:
    """Pairs of claims that read a common experiment and whose values are, on every seed both were judged
    on (at least two), identical, or differ by a constant, or sum to a constant (values that change from
    seed to seed). Such a pair is one measure counted twice (e.g. a reward that is the gold itself), or one
    claim implied by the other (an end value and its fall from a start at the ceiling), unless a claim
    declares the other in ``same_values`` with the reason they are different claims (both at a floor of 0)."""
    found = []
    judged = [o for o in outcomes if len(o.values) >= 2 and not o.deterministic]
    for i, a in enumerate(judged):
        for b in judged[i + 1:]:
            if not set(a.claim.experiments) & set(b.claim.experiments) or a.values.keys() != b.values.keys():
                continue
            x = np.array([a.values[s] for s in sorted(a.values)], dtype=float)
            y = np.array([b.values[s] for s in sorted(a.values)], dtype=float)
            if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
                continue
            moves = np.ptp(x) > _SAME
            if np.all(np.abs(x - y) <= _SAME):
                how = "the same values"
            elif moves and np.ptp(x - y) <= _SAME:
                how = "the same values plus a constant"
            elif moves and np.ptp(x + y) <= _SAME:
                how = "a constant minus the values"
            else:
                continue
            why = next((c.same_values[1] for c, other in ((a.claim, b.claim), (b.claim, a.claim))
                        if c.same_values and c.same_values[0] == other.id), "")
            found.append(Coincidence(a.claim, b.claim, how, why))
    return found


def experiments_of(claims: Sequence[Claim]) -> list[str]:
    """The experiments the claims read, most claims per CPU second first (so a run stopped early has
    judged as many claims as it could)."""
    count = {}
    for c in claims:
        for e in c.experiments:
            count[e] = count.get(e, 0) + 1
    return sorted(count, key=lambda n: (not EXPERIMENTS[n].cheap, -count[n] / EXPERIMENTS[n].cost_s))


def evaluate_claims(claims: Sequence[Claim], seeds: Sequence[int], *, root: Path | None = None, fresh: bool = False,
                    cached_only: bool = False, opts: Options = Options(), progressive: bool = True,
                    cheap_only: bool = False, deadline: float | None = None, after_each: Callable | None = None,
                    own_seeds: bool = False, log=print) -> tuple[list[Outcome], dict]:
    """Compute (or read) every experiment the claims need and judge them; returns (outcomes, info)
    where info = {experiment: {"seconds_by_seed", "code", "computed", "seeds"}}. ``cheap_only``: run
    only the cheap experiments (``--fast``); the other claims are "not run". ``deadline`` (a
    ``time.time()``): start no experiment after it (its claims are "not run", saying so).

    ``progressive``: first every experiment at the first seed, then every experiment at the other
    seeds, so that a run stopped early has covered as many claims as it could. ``after_each(outcomes,
    info)`` is called after each experiment (the command line rewrites the report there).
    ``own_seeds``: an experiment with its own ``seeds`` (its notebook's) runs at those instead of ``seeds``."""
    names = experiments_of(claims)
    skipped = {n: "not in the fast subset (make reproduce runs it)" for n in names
               if cheap_only and not EXPERIMENTS[n].cheap and not EXPERIMENTS[n].unavailable}
    names = [n for n in names if n not in skipped]
    fps: dict[str, str] = {}
    per_seed: dict[int, dict] = {s: {} for s in seeds}
    info: dict[str, dict] = {}
    def seeds_of(exp: Experiment) -> list[int]:
        return list(exp.seeds) if own_seeds and exp.seeds else list(seeds)

    def rounds_of(exp: Experiment) -> list[list[int]]:
        mine = seeds_of(exp)
        return [mine[:1], mine[1:]] if progressive and len(mine) > 1 else [mine]

    for r in range(2 if progressive else 1):
        for name in names:
            exp = EXPERIMENTS[name]
            rounds = rounds_of(exp)
            if r >= len(rounds) or not rounds[r]:
                continue
            round_seeds = rounds[r]
            if exp.unavailable:
                info[name] = {"unavailable": exp.unavailable}
                continue
            if not exp.seeded and r > 0:
                continue
            if deadline is not None and time.time() > deadline and not cached_only:
                have_any = any(name in per_seed[s] for s in per_seed)
                why = "not reached within the run's time budget (--stop-after)"
                if not have_any:
                    skipped[name] = why
                    info[name] = {"unavailable": why}
                elif name in info:
                    info[name]["note"] = f"seeds {','.join(map(str, round_seeds))}: {why}"
                continue
            want = round_seeds if exp.seeded else seeds_of(exp)  # deterministic: computed once, one blob for all
            for m in exp.models:
                if m not in fps:
                    fps[m] = model_fingerprint(m)
            got = compute(exp, want, root=root, fresh=fresh, cached_only=cached_only, models=fps, opts=opts, log=log)
            for s, blob in got.items():
                per_seed.setdefault(s, {})[name] = blob["result"]
            have = {s: per_seed[s][name] for s in per_seed if name in per_seed[s]}
            blobs = list({id(b): b for b in got.values()}.values())
            old = info.get(name, {})
            seconds = dict(old.get("seconds_by_seed", {}))
            for s, b in (got.items() if exp.seeded else list(got.items())[:1]):
                seconds[s] = b.get("seconds", 0.0)
            info[name] = {"seconds_by_seed": seconds,
                          "code": sorted(set(old.get("code", [])) | {b.get("code") for b in blobs}),
                          "computed": sorted(set(old.get("computed", [])) | {b.get("computed") for b in blobs}),
                          "seeds": sorted(have) if exp.seeded else "deterministic"}
            if after_each is not None:
                after_each(judge_all(claims, per_seed, skipped), info)
    for n, why in skipped.items():
        info[n] = {"unavailable": why}
    return judge_all(claims, per_seed, skipped), info


def select(only: Sequence[str] | None = None, fast: bool = False) -> list[Claim]:
    """The claims of the labs or experiments named in ``only`` (None: all); ``fast``: only those whose
    experiments are all cheap."""
    out = []
    for c in CLAIMS:
        if only and not any(c.lab == o or c.id.startswith(o) or o in c.experiments for o in only):
            continue
        if fast and not all(EXPERIMENTS[e].cheap for e in c.experiments):
            continue
        out.append(c)
    return out


# ============================================================================ the report

def _fmt(claim: Claim, x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return claim.fmt.format(x)


def ours_cell(o: Outcome) -> str:
    """The report's "ours" cell: the mean ± sd over seeds, then every seed's own value and how many
    pass (with the share a per-run claim needs); one value where the seed cannot change it."""
    c = o.claim
    if o.deterministic:
        why = c.seedless or "deterministic"
        return f"{_fmt(c, o.mean)} (one value: {why})" if c.seedless else f"{_fmt(c, o.mean)} ({why})"
    if len(o.values) < 2:
        s, v = next(iter(o.values.items()))
        return f"{_fmt(c, v)} (seed {s})"
    each = ", ".join(f"{s}: {_fmt(c, v)}" for s, v in o.values.items())
    n = len(o.values)
    if c.min_seeds is not None:  # judged seed by seed: the mean would say nothing
        return f"seeds {each} ({o.seeds_passing}/{n} pass, needs {seeds_needed(c, n)})"
    spread = f" ± {_fmt(c, o.spread)}" if math.isfinite(o.mean) else ""
    return f"{_fmt(c, o.mean)}{spread} (seeds {each}; {o.seeds_passing}/{n} pass)"


def summary_counts(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """{lab: {"total", "holds", "within about", "differs", "not run", "qualitative", "qualitative_held",
    "numeric", "numeric_held"}} plus an "all" row."""
    rows: dict[str, dict[str, int]] = {}
    for o in outcomes:
        for lab in (o.claim.lab, "all"):
            r = rows.setdefault(lab, {k: 0 for k in ("total", "holds", "within about", "differs", "not run",
                                                     "qualitative", "qualitative_held", "numeric", "numeric_held")})
            r["total"] += 1
            r[o.verdict] += 1
            kind = "qualitative" if o.claim.qualitative else "numeric"
            if o.verdict != "not run":
                r[kind] += 1
                r[kind + "_held"] += o.verdict in ("holds", "within about")
    order = [lab for lab in LABS if lab in rows] + ["all"]
    return {lab: rows[lab] for lab in order if lab in rows}


def write_report(outcomes: Sequence[Outcome], info: dict, seeds: Sequence[int], path: Path | str,
                 wall_s: float | None = None, load: str | None = None, fast: bool = False,
                 command: str = "python -m llmrl.tools.reproduce", state: str = "complete", smoke: bool = False,
                 own_seeds: bool = False) -> Path:
    """docs/reproduction.md: the summary by lab, then one table per lab (claim, statement, published,
    ours, tolerance and its reason, verdict), then the experiments' cost and provenance."""
    path = Path(path)
    lines = _report_header(seeds, info, wall_s, load, fast, command, state, smoke, own_seeds)
    lines += _summary_table(outcomes)
    lines += _claim_tables(outcomes)
    lines += coincidence_section(outcomes)
    lines += _experiments_table(info, code_fingerprint())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _report_header(seeds: Sequence[int], info: dict, wall_s: float | None, load: str | None, fast: bool,
                   command: str, state: str, smoke: bool, own_seeds: bool) -> list[str]:
    """The report's title, how it was made and read, and what this run cost."""
    lines = ["# Reproduction of the published results", "",
             f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f" ({'fast subset: only the cheap experiments were run' if fast else 'every claim'}); seeds {', '.join(map(str, seeds))}"
             + ("" if not own_seeds else " (" + "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in NOTEBOOK_SEEDS.items())
                + ", the seeds their notebooks train)") + "."
             " Regenerate with `make reproduce` (the cache under `artifacts/reproduce/` makes a rerun cheap;"
             " `--fresh` recomputes). The claims are data in `lib/llmrl/tools/claims.json` (each measured by `claim_measures.py` under its id); each is judged on the"
             " mean over seeds, or, where the published statement is about one run (\"the hack completes\"),"
             " on each seed with the share of seeds it needs: **holds** (a qualitative claim, or an exact value"
             " within its rounding), **within about** (a number within the published \"about\"), **differs**,"
             " **not run**. Each row lists every seed's own value and what the run would have to do for the claim to"
             " fail. Identities that hold for any correct implementation (the worked example's pi*, the Gibbs gap,"
             " unbiased estimators, greedy decoding's single answer, the toy LM's frontier, an exact computation"
             " of fixed scenarios) are tested in `lib/tests`, not claimed here: no run can miss them; nor is a"
             " value defined as another claim's, one implied by other claims' bounds, or a bound the measure's"
             " definition meets (the comments of `claim_measures.py` name the ones left out)."
             " Seeds: the RL experiments (lab19 parts 2-3, lab21's projects, hw4) train one run per seed; the"
             " claims about a checkpoint (lab11, lab21's models) vary only the sampling with the seed, since the"
             " checkpoints come from one SFT run; greedy decoding and exact computations give one value.", ""]
    if smoke:
        lines += [f"**Smoke run**: every training run was {SMOKE_STEPS} steps long. It checks that every experiment and"
                  " claim runs; its numbers mean nothing.", ""]
    if state != "complete":
        how = "the run stopped at its time budget" if state.startswith("stopped") else \
            "the run had not finished when this was written"
        lines += [f"**Partial report ({state})**: {how}. Claims marked \"not run\" were not reached; the others"
                  " are judged on the seeds listed in their row.", ""]
    if wall_s is not None:
        lines += [f"Wall time of this run{'' if state == 'complete' else ' so far'}: {wall_s / 60:.1f} min"
                  + (f" (load average {load})" if load else "")
                  + "; experiments read from the cache cost nothing here (their own cost is in the last table).", ""]
    secs = [v for i in info.values() for v in i.get("seconds_by_seed", {}).values()]
    if secs:
        lines += [f"Computing the results in the cache took {sum(secs) / 60:.1f} min of wall time in all (the sum over"
                  " the experiments and seeds of the last table; on a shared machine).", ""]
    return lines


def _summary_table(outcomes: Sequence[Outcome]) -> list[str]:
    """The count of verdicts by lab."""
    lines = ["## Summary", "", "| lab | claims | holds | within about | differs | not run | qualitative held |"
              " numeric held |", "|---|---|---|---|---|---|---|---|"]
    for lab, r in summary_counts(outcomes).items():
        q = f"{r['qualitative_held']}/{r['qualitative']}" if r["qualitative"] else "-"
        n = f"{r['numeric_held']}/{r['numeric']}" if r["numeric"] else "-"
        lines.append(f"| {'**all**' if lab == 'all' else lab} | {r['total']} | {r['holds']} | {r['within about']} |"
                     f" {r['differs']} | {r['not run']} | {q} | {n} |")
    lines.append("")
    return lines


def _claim_tables(outcomes: Sequence[Outcome]) -> list[str]:
    """One table per lab: each claim, its values and its verdict."""
    lines: list[str] = []
    for lab in LABS:
        rows = [o for o in outcomes if o.claim.lab == lab]
        if not rows:
            continue
        lines += [f"## {lab}", "", "| id | claim | published | ours (mean ± sd; seeds) | tolerance | could fail if |"
                  " verdict |", "|---|---|---|---|---|---|---|"]
        for o in rows:
            c = o.claim
            ours = ours_cell(o) if o.values else "–"
            tol = f"{c.check.describe()}: {c.check.reason}"
            verdict = f"**{o.verdict}**" + (f": {o.note}" if o.note else "")
            cell = lambda s: s.replace("|", "\\|")  # noqa: E731
            lines.append(f"| `{c.id}` | {cell(c.statement)} | {cell(c.published)} | {cell(ours)} | {cell(tol)} |"
                         f" {cell(c.could_fail)} | {cell(verdict)} |")
        lines.append("")
    return lines


def _experiments_table(info: dict, code_now: str) -> list[str]:
    """Each experiment's seeds, cost, date and the library code it was computed with."""
    lines = ["## Experiments", "", "Each is computed once per seed and shared by the claims that read it."
              " Seconds: wall time per seed when it was computed (divided among the seeds computed together;"
              " on a shared machine, so noisy).", "",
              "| experiment | seeds | s per seed | computed | library code |", "|---|---|---|---|---|"]
    for name, i in info.items():
        if "unavailable" in i:
            lines.append(f"| {name} | – | – | not run: {i['unavailable']} | – |")
            continue
        if not i.get("code"):
            lines.append(f"| {name} | – | – | not run | – |")
            continue
        stale = [c for c in i["code"] if c != code_now]
        code = ", ".join(i["code"]) + (" (**older than the current library: rerun with --fresh**)" if stale else " (current)")
        seeds_txt = i["seeds"] if isinstance(i["seeds"], str) else ",".join(map(str, i["seeds"]))
        secs = list(i["seconds_by_seed"].values())
        per = f"{np.mean(secs):.1f}" if secs else "–"
        note = f" ({i['note']})" if i.get("note") else ""
        lines.append(f"| {name} | {seeds_txt}{note} | {per} | {', '.join(i['computed'])} | {code} |")
    lines.append("")
    return lines


def coincidence_section(outcomes: Sequence[Outcome]) -> list[str]:
    """The report's list of claim pairs whose per-seed values move together exactly (:func:`coincidences`):
    those declared, with the reason they are still two claims, and any undeclared one, flagged."""
    found = coincidences(outcomes)
    undeclared = [k for k in found if not k.declared]
    lines = ["## Claims whose values coincide", "",
             "Pairs of claims on a shared experiment whose values are the same on every seed, or differ by a"
             " constant, or sum to one (`llmrl.tools.reproduce.coincidences`): one measure counted twice, unless a"
             " claim declares the other (`same_values` in claims.json) with the reason they are two claims."
             f" Undeclared: **{len(undeclared)}**.", ""]
    if found:
        lines += ["| claims | how | declared |", "|---|---|---|"]
        for k in found:
            lines.append(f"| `{k.first.id}`, `{k.second.id}` | {k.how} | "
                         + (k.declared.replace("|", "\\|") if k.declared else "**no: one measure counted twice?**") + " |")
        lines.append("")
    return lines


def _load() -> str | None:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.tools.reproduce", description=__doc__.splitlines()[0])
    p.add_argument("--fast", action="store_true", help="only the claims whose experiments are cheap (about a minute)")
    p.add_argument("--only", action="append", default=None, metavar="LAB|CLAIM|EXPERIMENT",
                   help="restrict to a lab (lab11), a claim id prefix or an experiment (lab21/project5); repeatable")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds for every experiment (default 0,1,2, and each notebook's own seeds "
                        "where it trains others: " + "; ".join(f"{k} {','.join(map(str, v))}"
                                                              for k, v in NOTEBOOK_SEEDS.items()) + ")")
    p.add_argument("--out", default=None, help="report path (default docs/reproduction.md)")
    p.add_argument("--cache", default=None, help="cache folder (default artifacts/reproduce)")
    p.add_argument("--fresh", action="store_true", help="recompute everything, ignoring the cache")
    p.add_argument("--report-only", action="store_true", help="run nothing; report from the cache")
    p.add_argument("--workers", type=int, default=1, help="processes for the training runs (one thread each)")
    p.add_argument("--smoke", action="store_true",
                   help=f"every training run {SMOKE_STEPS} steps: checks the pipeline end to end; the numbers mean "
                        "nothing (own cache; report in artifacts/reproduce/smoke/)")
    p.add_argument("--stop-after", type=float, default=None, metavar="MIN",
                   help="start no experiment after MIN minutes; the report says which claims were not reached")
    p.add_argument("--list", action="store_true", help="print the claims and exit")
    a = p.parse_args(argv)
    try:
        seeds = list(DEFAULT_SEEDS) if a.seeds is None else [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, got {a.seeds!r}")
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        p.error(f"--seeds must name distinct seeds >= 0, got {a.seeds!r}")
    if a.workers < 1:
        p.error(f"--workers must be >= 1, got {a.workers}")
    if a.only:
        known = set(LABS) | set(EXPERIMENTS)
        for o in a.only:
            if o not in known and not any(c.id.startswith(o) for c in CLAIMS):
                p.error(f"--only {o!r} names no lab, experiment or claim (labs: {', '.join(LABS)})")
    claims = select(a.only, a.fast and a.list)
    if a.list:
        for c in claims:
            print(f"{c.id:34s} {c.published:24s} {c.statement}")
        print(f"{len(claims)} claims")
        return 0
    from ..utils import set_threads
    set_threads(1)
    opts = Options(smoke=a.smoke, workers=a.workers)
    root = Path(a.cache) if a.cache else cache_dir()
    out = Path(a.out) if a.out else (root / "smoke" / "reproduction.md" if a.smoke else default_report_path())
    cmd = ("python -m llmrl.tools.reproduce " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    t0 = time.time()

    def report(outcomes, info, state):
        write_report(outcomes, info, seeds, out, time.time() - t0, _load(), a.fast, cmd, state=state, smoke=a.smoke,
                     own_seeds=a.seeds is None)

    try:
        outcomes, info = evaluate_claims(claims, seeds, root=root, fresh=a.fresh, cached_only=a.report_only, opts=opts,
                                         cheap_only=a.fast, after_each=lambda o, i: report(o, i, "in progress"),
                                         own_seeds=a.seeds is None,
                                         deadline=None if a.stop_after is None else t0 + 60 * a.stop_after)
    except KeyboardInterrupt:
        print(f"[reproduce] stopped; the report so far is in {out}", file=sys.stderr)
        return 130
    stopped = [n for n, i in info.items() if "time budget" in i.get("unavailable", "") + i.get("note", "")]
    report(outcomes, info, f"stopped at --stop-after {a.stop_after:g} min before {', '.join(stopped)}" if stopped
           else "complete")
    wall = time.time() - t0
    for lab, r in summary_counts(outcomes).items():
        print(f"{lab:6s} {r['holds'] + r['within about']}/{r['total']} hold or within about, {r['differs']} differ, "
              f"{r['not run']} not run")
    for k in coincidences(outcomes):
        if not k.declared:
            print(f"[reproduce] {k.first.id} and {k.second.id}: {k.how} on every seed, and neither declares the other "
                  "(same_values in claims.json): one measure counted twice?", file=sys.stderr)
    print(f"report: {out}; wall time {wall / 60:.1f} min (load average {_load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
