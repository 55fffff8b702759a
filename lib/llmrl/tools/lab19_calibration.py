"""Choose the sft model of lab11 and lab19 by a rule written down before any candidate was run.

The published lab11 and lab19 start from one SFT TinyLM ("about 80% greedy, 55% at T = 1, below
30% at T = 2") and report what RL does to it: with the proxy reward and no KL the policy pads every
answer to the 4-character maximum and its accuracy falls to 0; with 4 epochs a batch its entropy
falls from about 0.35 to about 0.15 nats per token within 120 steps. The course's earlier sft model
(step 362 of the ReLU run of seed 0 of the course's recipe) was the snapshot nearest the calibration whose
lab19 run of seed 0 hacked; on the five seeds the notebook trains it completed the hack on 2 and its
entropy stood at 0.21 after 120 steps, still falling. This module searches again, judging every
candidate on every seed.

**The rule** (committed before the first candidate was run; the report prints it):

* **Candidates.** SFT runs of the course's recipe (``checkpoints.COURSE_SFT``: 1,200 steps of 64
  rows, AdamW at 3e-3 after a 50-step warmup, cosine decay to a tenth) with the MLP's nonlinearity
  in :data:`ACTIVATIONS` and the seed in :data:`SEEDS` (:data:`RUNS`: 8 runs; ReLU seed 0 is the run
  shipped before). Each run's snapshots are scanned as the shipped models' rebuild scans them
  (:func:`llmrl.tools.rebuild_models.scan_snapshots`: every 5 steps from 100, and every step near the best ones)
  and measured on lab11's calibration (:func:`llmrl.tools.rebuild_models.calibration`: greedy, T = 1 and T = 2
  accuracy on 1,000 problems). A snapshot is *admissible* when its greedy accuracy is within 0.05 of
  0.80, its T = 1 accuracy within 0.05 of 0.55 and its T = 2 accuracy below 0.27 (the published
  "below 30%" with a margin of 0.03). A run's candidates are its admissible snapshots in order of
  their distance to the calibration (:func:`llmrl.tools.rebuild_models.distance`), keeping the nearest
  :data:`PER_RUN` of them that lie at least :data:`MIN_GAP` steps apart.
* **Judging.** A candidate replaces the shipped sft model and every claim of ``llmrl.tools.reproduce``
  that starts from that model (experiments ``lab11/sweep``, ``lab11/kl``, ``lab19/hacking``,
  ``lab19/entropy``) is judged with its own tolerance on its notebook's seeds (lab11: 0-2, lab19:
  0-4), exactly as ``make reproduce`` judges it. lab19's settings (learning rate 5e-4, 300 and 120
  steps, 16 prompts x 8 samples) are not searched.
* **Gates** (the issue's three): (1) ``lab19.entropy-end`` holds: the clipped runs' entropy over
  steps 111-120, mean over seeds 0-4, within 0.15 +- 0.03; (2) ``lab19.hack-completed`` holds: the
  no-KL run ends at length >= 3.9 and accuracy <= 0.05 on at least 4 of the 5 seeds; (3)
  ``lab11.greedy-accuracy`` within 0.80 +- 0.05.
* **Choice.** Among the candidates that pass all three gates: the most claims held, then the most
  numeric claims held, then the nearest to the calibration, then the first by (nonlinearity, seed,
  step). If none passes all three: the most gates passed, then the same order; the report then
  says which gate the shipped model misses.

Every judged row is committed under ``docs/lab19-calibration/`` (JSON), so ``--report-only`` writes
``docs/lab19-calibration.md`` again on any machine; the trained runs and their states are cached
under ``artifacts/lab19-calibration/``.

    python -m llmrl.tools.lab19_calibration --runs relu:0 gelu:0 --workers 2   # some runs
    python -m llmrl.tools.lab19_calibration --all --workers 2                  # every run of RUNS
    python -m llmrl.tools.lab19_calibration --report-only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from ..utils import repo_root
from . import candidate_models, rebuild_models
from .lab21_calibration import outcome_cell, parse_run, tally

ROOT = (repo_root() or Path.cwd())
WORK = ROOT / "artifacts" / "lab19-calibration"
REPORT = ROOT / "docs" / "lab19-calibration.md"
RECORD = ROOT / "docs" / "lab19-calibration"  # the judged rows, JSON: the report is written from these
ACTIVATIONS = ("relu", "gelu")
SEEDS = (0, 1, 2, 3)
RUNS = tuple((a, s) for a in ACTIVATIONS for s in SEEDS)
PER_RUN = 3      # candidates judged per run
MIN_GAP = 10     # steps between two candidates of one run
# Admissible: lab11's calibration on 1,000 problems (llmrl.tools.rebuild_models.calibration).
ADMISSIBLE = {"greedy": (0.80, 0.05), "sampled_T1": (0.55, 0.05)}
T2_BELOW = 0.27
# The experiments that start from the sft model, and the claims judged on them.
EXPERIMENTS = ("lab11/sweep", "lab11/kl", "lab19/hacking", "lab19/entropy")
GATES = {"entropy": "lab19.entropy-end", "hack": "lab19.hack-completed", "greedy": "lab11.greedy-accuracy"}
HELD = ("holds", "within about")


def claims() -> list:
    """The claims a candidate is judged on: those of :data:`EXPERIMENTS`."""
    from . import reproduce as R

    return [c for c in R.CLAIMS if set(c.experiments) <= set(EXPERIMENTS)]


def admissible(row: dict) -> bool:
    return (all(abs(row[k] - want) <= tol + 1e-12 for k, (want, tol) in ADMISSIBLE.items())
            and row["sampled_T2"] < T2_BELOW)


def pick_candidates(rows: Sequence[dict], per_run: int = PER_RUN, gap: int = MIN_GAP) -> list[dict]:
    """A run's candidates: its admissible scan rows, nearest to the calibration first, at least ``gap``
    steps apart, at most ``per_run``."""

    out = []
    for r in sorted((r for r in rows if admissible(r)), key=lambda r: (rebuild_models.distance(r, "sft"), r["step"])):
        if all(abs(r["step"] - o["step"]) >= gap for o in out):
            out.append(r)
        if len(out) == per_run:
            break
    return out


# ------------------------------------------------------------------------------ runs and candidates
def run_config(activation: str, seed: int):
    """The course's SFT recipe with this nonlinearity and seed."""
    from ..sft.checkpoints import COURSE_SFT

    return replace(COURSE_SFT, seed=seed, model=replace(COURSE_SFT.model, activation=activation))


def _run_dir(activation: str, seed: int) -> Path:
    return WORK / "runs" / f"{activation}-seed{seed}"


def scan_run(activation: str, seed: int, log=print) -> dict:
    """The run's scan (cached): {"activation", "seed", "rows", "candidates", "scan_seconds"}; each
    candidate's state is saved beside it (``step<N>.pt``)."""

    d = _run_dir(activation, seed)
    if (d / "scan.json").exists():
        return json.loads((d / "scan.json").read_text())
    t = time.time()
    _, states, rows = rebuild_models.scan_snapshots(run_config(activation, seed), progress=False, roles=("sft",))
    picked = pick_candidates(rows)
    d.mkdir(parents=True, exist_ok=True)
    for r in picked:
        torch.save(states[r["step"]], d / f"step{r['step']}.pt")
    out = {"activation": activation, "seed": seed, "rows": rows,
           "candidates": [{"step": r["step"], "calibration": {k: v for k, v in r.items() if k != "step"},
                           "distance": round(rebuild_models.distance(r, "sft"), 3)} for r in picked],
           "admissible": sum(admissible(r) for r in rows), "scan_seconds": round(time.time() - t, 1)}
    (d / "scan.json").write_text(json.dumps(out))
    log(f"[lab19-calibration] {activation} seed {seed}: {out['admissible']} admissible snapshots, candidates "
        f"{[c['step'] for c in out['candidates']]} ({out['scan_seconds']:.0f} s)")
    return out


def _models_dir(activation: str, seed: int, step: int) -> Path:
    """A copy of the shipped models folder whose sft model is this candidate (manifest updated)."""
    d = _run_dir(activation, seed)
    return candidate_models.models_copy(d / f"models-step{step}", {"sft": (d / f"step{step}.pt", step)},
                                        recipe=f"lab19_calibration.run_config({activation!r}, {seed})")


@contextlib.contextmanager
def candidate(activation: str, seed: int, step: int):
    """Within: the library's shipped sft model is this candidate (forked workers inherit it)."""
    from ..sft.supervised import Snapshot

    run = (run_config(activation, seed), {"sft": Snapshot(step)})
    with candidate_models.shipped_as(_models_dir(activation, seed, step), {"sft": run}):
        yield


def gates(outcomes: dict) -> dict:
    """{gate: passed} of a row's outcomes ({claim id: [mean, verdict]})."""
    return {g: outcomes.get(cid, [None, "not run"])[1] in HELD for g, cid in GATES.items()}


def judge(activation: str, seed: int, cand: dict, workers: int = 1) -> dict:
    """One candidate's row: its scan entry, every claim of :func:`claims` judged (with each seed's
    values for the gates' claims), and the gates."""
    from . import reproduce as R

    step = cand["step"]
    t = time.time()
    with candidate(activation, seed, step):
        outs, _ = R.evaluate_claims(claims(), list(R.DEFAULT_SEEDS),
                                    root=_run_dir(activation, seed) / f"reproduce-step{step}",
                                    opts=R.Options(workers=workers), own_seeds=True, log=lambda *a: None)
    row = {"activation": activation, "seed": seed, **cand, **tally(outs, numeric=True),
           "per_seed": {o.claim.id: {str(s): v for s, v in o.values.items()} for o in outs
                        if o.claim.id in GATES.values() or o.claim.id.startswith("lab19.hack-final")},
           "judge_seconds": round(time.time() - t, 1)}
    row["gates"] = gates(row["outcomes"])
    return row


def rank(row: dict) -> tuple:
    """The rule's order (smallest first): all gates passed, the most claims held, the most numeric
    claims held, the nearest to the calibration, then (nonlinearity, seed, step)."""
    n_gates = sum(row["gates"].values())
    return (-n_gates, -row["held"], -row["numeric_held"], row["distance"], row["activation"], row["seed"], row["step"])


def choose(rows: Sequence[dict]) -> dict:
    if not rows:
        raise ValueError("no candidate of the search was judged")
    return min(rows, key=rank)


def _key(r: dict):
    return (r["activation"], r["seed"], r["step"])


def _record(name: str) -> list[dict]:
    return candidate_models.read_record(RECORD, name)


def _save_record(name: str, rows: list[dict], key) -> None:
    candidate_models.save_record(RECORD, name, rows, key)


# ------------------------------------------------------------------------------ the report
RULE = (
    "The rule, committed before the first candidate was run (`lib/llmrl/tools/lab19_calibration.py`, its "
    "docstring): candidates are SFT runs of the course's recipe (`checkpoints.COURSE_SFT`: 1,200 steps of 64 "
    "rows, AdamW at 3e-3 after a 50-step warmup, cosine decay to a tenth) with nonlinearity {relu, gelu} and "
    "seed {0, 1, 2, 3}; in each run the snapshots whose 1,000-problem calibration is within 0.05 of 0.80 "
    "greedy and of 0.55 at T = 1, with T = 2 below 0.27, are admissible, and the "
    f"{PER_RUN} nearest to the calibration at least {MIN_GAP} steps apart are judged. A candidate replaces the "
    "shipped sft model and every `llmrl.tools.reproduce` claim of lab11's sweep and KL experiments and lab19's "
    "Parts 2-3 is judged with its own tolerance on its notebook's seeds (lab11 0-2, lab19 0-4). Gates: "
    "lab19's entropy after 120 steps within 0.15 ± 0.03 (`lab19.entropy-end`), the no-KL hack completed on at "
    "least 4 of 5 seeds (`lab19.hack-completed`), lab11's greedy accuracy within 0.80 ± 0.05. The choice: "
    "all gates passed, then the most claims held, then the most numeric ones, then the nearest to the "
    "calibration.")


def report(rows: Sequence[dict], runs: Sequence[dict]) -> list[str]:
    lines = ["# lab11 and lab19: choosing the sft model", "",
             "Written by `python -m llmrl.tools.lab19_calibration --report-only` from the judged rows committed in "
             "`docs/lab19-calibration/`.", "", RULE, ""]
    if runs:
        lines += ["## The runs scanned", "", "| nonlinearity | SFT seed | admissible snapshots | candidates (step: "
                  "greedy / T=1 / T=2, distance) | scan seconds |", "|---|---|---|---|---|"]
        for r in sorted(runs, key=lambda r: (r["activation"], r["seed"])):
            cands = "; ".join(f"{c['step']}: {c['calibration']['greedy']:.3f} / {c['calibration']['sampled_T1']:.3f} / "
                              f"{c['calibration']['sampled_T2']:.3f}, {c['distance']:.2f}" for c in r["candidates"]) or "none"
            lines.append(f"| {r['activation']} | {r['seed']} | {r['admissible']} | {cands} | {r['scan_seconds']:.0f} |")
        lines.append("")
    if not rows:
        return lines
    best = choose(rows)
    lines += ["## The candidates judged", "",
              "| nonlinearity | seed | step | distance | entropy gate | hack gate (seeds completed) | greedy gate | held "
              "| numeric | qualitative |", "|---|---|---|---|---|---|---|---|---|---|"]
    mark = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    for r in sorted(rows, key=_key):
        done = r["per_seed"].get(GATES["hack"], {})
        ent = r["outcomes"].get(GATES["entropy"], [float("nan")])[0]
        greedy = r["outcomes"].get(GATES["greedy"], [float("nan")])[0]
        chosen = " **(chosen)**" if r is best else ""
        lines.append(f"| {r['activation']}{chosen} | {r['seed']} | {r['step']} | {r['distance']:.2f} | "
                     f"{mark(r['gates']['entropy'])} ({ent:.3f}) | {mark(r['gates']['hack'])} "
                     f"({int(sum(v for v in done.values()))}/{len(done)}) | {mark(r['gates']['greedy'])} ({greedy:.3f}) | "
                     f"{r['held']}/{r['total']} | {r['numeric_held']}/{r['numeric']} | "
                     f"{r['qualitative_held']}/{r['qualitative']} |")
    lines += ["", "### Claim by claim (mean over seeds; verdict)", "",
              "| claim | " + " | ".join(f"{r['activation']} {r['seed']}/{r['step']}" for r in sorted(rows, key=_key)) + " |",
              "|---|" + "---|" * len(rows)]
    for cid in sorted({i for r in rows for i in r["outcomes"]}):
        lines.append(f"| `{cid}` | " + " | ".join(outcome_cell(r, cid) for r in sorted(rows, key=_key)) + " |")
    return lines + [""]


def write_report(path: Path = REPORT) -> None:
    lines = report(_record("candidates"), _record("runs"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.tools.lab19_calibration", description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", default=None, metavar="ACT:SEED", help="these runs of RUNS (relu:0, gelu:2, ...)")
    p.add_argument("--all", action="store_true", help="every run of RUNS")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--report-only", action="store_true", help="write the report from the committed records")
    a = p.parse_args(argv)
    todo = list(RUNS) if a.all else [parse_run(r) for r in (a.runs or [])]
    for act, seed in todo:
        if (act, seed) not in RUNS:
            p.error(f"{act}:{seed} is not a run of the search (RUNS: {RUNS})")
    for act, seed in todo:
        scan = scan_run(act, seed)
        _save_record("runs", [{k: v for k, v in scan.items() if k != "rows"}], lambda r: (r["activation"], r["seed"]))
        for cand in scan["candidates"]:
            if any(_key(r) == (act, seed, cand["step"]) for r in _record("candidates")):
                continue
            row = judge(act, seed, cand, a.workers)
            _save_record("candidates", [row], _key)
            print(f"[lab19-calibration] {act} seed {seed} step {cand['step']}: gates {row['gates']}, "
                  f"{row['held']}/{row['total']} held ({row['judge_seconds']:.0f} s)", flush=True)
            write_report()
    write_report()
    rows = _record("candidates")
    if rows:
        b = choose(rows)
        print(f"[lab19-calibration] chosen so far: {b['activation']} seed {b['seed']} step {b['step']} "
              f"(gates {b['gates']}, {b['held']}/{b['total']} held)")
    print(f"[lab19-calibration] report in {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
