"""Calibrate what lab21's published setting leaves open, by recorded searches.

The published setting fixes the task, the budgets (steps; 16 prompts x 8 samples for Projects 1-5, 64
sequences a step for Project 0), the evaluation sizes it names (Project 4: 100 prompts x 16 samples)
and Project 0's optimiser (AdamW at 3e-4), which the course also takes for Projects 1-5, sampling and
evaluating at T = 1. It leaves open:

* **the student and the teacher.** "TinyLM after 1,200 SFT steps, about 100% accurate" and "the same
  architecture after only 300 SFT steps, about 50% greedy and 30% sampled" of another TinyLM, whose
  SFT run (seed, schedule, the MLP's nonlinearity) is not given. The first search (``--runs``) tries
  SFT runs of the course's recipe that differ in the nonlinearity and the seed. ReLU is the course's
  first TinyLM; GELU is the nonlinearity of the plain-torch TinyLM in ``../shared/baseline``, written
  the way the published course's code is. A run's teacher is its last step and its student the
  snapshot nearest the published calibration (:func:`llmrl.tools.rebuild_models.choose`). A run whose nearest
  snapshot is more than :data:`MAX_DISTANCE` away is recorded and not judged. A judged run trains every
  lab21 experiment of :mod:`llmrl.tools.reproduce` at the shipped settings, seeds 0-2 (Project 1: 0-4, its
  notebook's), and every lab21 claim is judged with its own tolerance.
* **how Project 0's 64 sequences a step split** into prompts x samples (``--p0-splits``), with the
  shipped student.

The rules. First search: most claims held (each claim counts once, qualitative or numeric), then
most qualitative claims held, then the student nearest the published calibration. Second search:
most qualitative claims held, then most held, then the setting before the search, then fewer
prompts. The first search's rule was changed while it ran (:data:`RUN_NOTES` says how and why). Every judged row is committed under ``docs/lab21-calibration/`` as
JSON, so ``--report-only`` writes ``docs/lab21-calibration.md`` again on any machine; the trained
runs are cached under ``artifacts/lab21-calibration/``. The searches made for the ReLU student before
(a snapshot step and a learning rate per project, an evaluation temperature) are kept as recorded in
``docs/lab21-calibration-relu.md``.

    python -m llmrl.tools.lab21_calibration --runs relu:0 gelu:0 gelu:1 gelu:2 --workers 2
    python -m llmrl.tools.lab21_calibration --p0-splits --workers 2
    python -m llmrl.tools.lab21_calibration --report-only
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

ROOT = (repo_root() or Path.cwd())
WORK = ROOT / "artifacts" / "lab21-calibration"
REPORT = ROOT / "docs" / "lab21-calibration.md"
RECORD = ROOT / "docs" / "lab21-calibration"  # the judged rows, JSON: the report is written from these
RELU_RECORD = "lab21-calibration-relu.md"  # the earlier searches, for the ReLU student, as recorded
MAX_DISTANCE = 4.0  # a run whose nearest snapshot is farther from the published calibration is not judged
ACTIVATIONS = ("relu", "gelu")


def tally(outs, numeric: bool = False) -> dict:
    """A row's counts from :func:`llmrl.tools.reproduce.judge_all` outcomes: claims held ("holds" or "within
    about") of all, of the qualitative ones (and of the numeric ones), and each claim's [mean, verdict]."""
    def held(subset):
        return sum(o.verdict in ("holds", "within about") for o in subset)

    qual = [o for o in outs if o.claim.qualitative]
    row = {"held": held(outs), "total": len(outs), "qualitative_held": held(qual), "qualitative": len(qual)}
    if numeric:
        num = [o for o in outs if not o.claim.qualitative]
        row.update(numeric_held=held(num), numeric=len(num))
    return {**row, "outcomes": {o.claim.id: [o.mean, o.verdict] for o in outs}}


SHORT_VERDICT = {"holds": "holds", "within about": "about", "differs": "**differs**", "not run": "not run"}


def outcome_cell(row: dict, claim_id: str) -> str:
    """A claim-by-claim table's cell: the row's mean for the claim and its verdict, short."""
    m, v = row["outcomes"].get(claim_id, [float("nan"), "not run"])
    return f"{m:.3f} {SHORT_VERDICT.get(v, v)}"


def project_claims(project: str) -> list:
    from . import reproduce as R

    return [c for c in R.select(["lab21"]) if c.experiments == (f"lab21/{project}",)]


def _record(name: str) -> list[dict]:
    return candidate_models.read_record(RECORD, name)


def _save_record(name: str, rows: list[dict], key) -> None:
    candidate_models.save_record(RECORD, name, rows, key)


# ------------------------------------------------------------------------------ the first search: the SFT run
def parse_run(text: str) -> tuple[str, int]:
    """"gelu:2" -> ("gelu", 2)."""
    act, _, seed = text.partition(":")
    if act not in ACTIVATIONS or not seed.isdigit():
        raise ValueError(f"a run is ACTIVATION:SEED with ACTIVATION one of {ACTIVATIONS}, e.g. gelu:2; got {text!r}")
    return act, int(seed)


def run_config(activation: str, seed: int):
    """The course's SFT recipe with this nonlinearity and seed."""
    from ..sft.checkpoints import COURSE_SFT

    return replace(COURSE_SFT, seed=seed, model=replace(COURSE_SFT.model, activation=activation))


def _run_dir(activation: str, seed: int) -> Path:
    return WORK / "runs" / f"{activation}-seed{seed}"


def scan_run(activation: str, seed: int, log=print) -> dict:
    """The run's scan (cached): {"activation", "seed", "step", "calibration", "distance", "measured"} of its
    snapshot nearest the published calibration; its student and teacher states are saved beside it."""

    d = _run_dir(activation, seed)
    if (d / "scan.json").exists():
        return json.loads((d / "scan.json").read_text())
    t = time.time()
    teacher, states, rows = rebuild_models.scan_snapshots(run_config(activation, seed), progress=False, roles=("student",))
    best = rebuild_models.choose(rows, "student")
    d.mkdir(parents=True, exist_ok=True)
    torch.save(states[best["step"]], d / "student.pt")
    torch.save(teacher, d / "teacher.pt")
    out = {"activation": activation, "seed": seed, "step": best["step"],
           "calibration": {k: v for k, v in best.items() if k != "step"},
           "distance": round(rebuild_models.distance(best, "student"), 3), "measured": len(rows),
           "scan_seconds": round(time.time() - t, 1)}
    (d / "scan.json").write_text(json.dumps(out))
    log(f"[lab21-calibration] {activation} seed {seed}: nearest snapshot step {best['step']}, distance "
        f"{out['distance']:.2f} ({out['scan_seconds']:.0f} s)")
    return out


def _models_dir(activation: str, seed: int, step: int) -> Path:
    """A copy of the shipped models folder whose teacher and student are the run's (manifest updated)."""
    d = _run_dir(activation, seed)
    weights = {"student": (d / "student.pt", step), "teacher": (d / "teacher.pt", run_config(activation, seed).steps)}
    return candidate_models.models_copy(d / "models", weights,
                                        recipe=f"lab21_calibration.run_config({activation!r}, {seed})")


@contextlib.contextmanager
def candidate(activation: str, seed: int, step: int):
    """Within: the library's shipped teacher and student are the run's (forked workers inherit it)."""
    from ..sft.supervised import Snapshot

    cfg = run_config(activation, seed)
    snaps = {"student": Snapshot(step), "teacher": Snapshot(cfg.steps)}
    with candidate_models.shipped_as(_models_dir(activation, seed, step), {"student": (cfg, snaps), "teacher": (cfg, snaps)}):
        yield


def judge_run(activation: str, seed: int, seeds: Sequence[int], workers: int = 1, log=print) -> dict:
    """A row of the first search: the run's scan, and (within :data:`MAX_DISTANCE`) every lab21 claim judged."""
    from . import reproduce as R

    scan = scan_run(activation, seed, log)
    row = {**scan, "seeds": list(seeds), "judged": scan["distance"] <= MAX_DISTANCE}
    if not row["judged"]:
        return row
    t = time.time()
    with candidate(activation, seed, scan["step"]):
        outs, _ = R.evaluate_claims(R.select(["lab21"]), list(seeds), root=_run_dir(activation, seed) / "reproduce",
                                    opts=R.Options(workers=workers), own_seeds=True, log=lambda *a: None)
    return {**row, **tally(outs, numeric=True), "judge_seconds": round(time.time() - t, 1)}


def choose_run(rows: Sequence[dict]) -> dict:
    """The first search's rule: most claims held, then most qualitative claims held, then nearest the calibration."""
    judged = [r for r in rows if r.get("judged")]
    if not judged:
        raise ValueError("no run of the search was judged")
    return min(judged, key=lambda r: (-r["held"], -r["qualitative_held"], r["distance"], r["activation"], r["seed"]))


def _run_key(r: dict):
    return (r["activation"], r["seed"])


# What to know about the first search (read off its records; docs/lab21-calibration.md prints them).
RUN_NOTES = (
    "How it came about. Runs made before the search, with scripts that are not kept, pointed at the nonlinearity: "
    "ReLU students taken where their sampled accuracy is near the published 0.30-0.34 (step 287 of the course's "
    "run, and step 450 of a run at a constant learning rate of 1e-3) did not improve in Project 0's rl arm or "
    "Project 1's symmetric arm (pass@1 0.32 -> 0.32), while GELU students at the same calibration did. The "
    "search then put three ReLU and seven GELU runs of the course's recipe to every lab21 claim.",
    "The rule was changed while the search ran. It was first the earlier searches' rule, most qualitative "
    "claims first. After the first run judged (GELU seed 2) and before the others, the count of all claims "
    "was put first: one qualitative claim, Project 3's \"the other buckets drift down\", needs the target-only "
    "arm to change the model, which it never does for a student that never solves a 3d+1d problem (every "
    "group's advantage is 0: drift exactly 0.000, as for GELU seeds 2 and 4 and ReLU seed 1). Under the first "
    "rule the ReLU run of seed 0 (the student shipped before, 15 of 15 qualitative claims) would win with 38 "
    "claims held and 23 of 50 numeric ones; under the rule applied, GELU seed 2 wins with 55 and 41.",
    "What the table shows. The student's distance to the published calibration matters most: the judged runs "
    "within 2 of it hold 46-55 claims, those beyond 3 hold 33-40. GELU seed 2's student is by far the "
    "nearest (0.32: greedy 0.509, sampled 0.291, KL 1.942 against 0.50, 0.30, 1.98). The best ReLU run "
    "(seed 1, distance 1.57) holds 49. It does better on Project 0's distillation arms at the 32 x 2 split "
    "then shipped, where GELU seed 2's overshoot (they hold at 16 x 4, the second search), and misses what RL "
    "alone has to do: Project 0's rl arm (pass@1 0.420 against 0.54), Project 1's entropy collapse "
    "(symmetric 0.266 against 0.222) and its no-clip pass@1, Project 3's uniform arm, and Project 5's "
    "sharpening (pass@1 after RL 0.517 against 0.67; pass@64 rises instead of falling, so the curves do not "
    "cross), all of which GELU seed 2 holds.",
)


# ------------------------------------------------------------------------------ the second search: Project 0's split
# How Project 0's published 64 sequences a step split into prompts x samples per prompt: a setting of the run, not
# of the student. One training run per split at seeds 0-2 with the shipped student, judged on Project 0's claims.
# "64x1+rl8x8" gives the three distillation arms (which need no group) 64 prompts of one sample and the rl arm,
# whose advantage needs a group, 8 x 8.
SPLITS = ("8x8", "16x4", "32x2", "64x1+rl8x8")


def _split_arms(split: str) -> list[tuple[tuple[str, ...], int, int]]:
    """[(arms, prompts, samples per prompt)] of a split name (see :data:`SPLITS`)."""
    from ..labs import lab21

    parts = split.split("+")
    p, g = (int(x) for x in parts[0].split("x"))
    if p * g != 64:
        raise ValueError(f"split {split!r}: {p} x {g} is not Project 0's 64 sequences")
    if len(parts) == 1:
        return [(lab21.PROJECT0_ARMS, p, g)]
    if len(parts) != 2 or not parts[1].startswith("rl"):
        raise ValueError(f"split {split!r}: expected PxG or PxG+rlPxG")
    rp, rg = (int(x) for x in parts[1][2:].split("x"))
    if rp * rg != 64:
        raise ValueError(f"split {split!r}: the rl arm's {rp} x {rg} is not 64 sequences")
    return [(tuple(a for a in lab21.PROJECT0_ARMS if a != "rl"), p, g), (("rl",), rp, rg)]


def shipped_student_step() -> int:
    from ..store import shipped

    return shipped.manifest()["models"]["student"]["step"]


def split_run(split: str, seeds: Sequence[int], workers: int = 1, log=print) -> dict:
    """Project 0 at one split with the shipped student, seeds trained together (cached): {"split", "seeds",
    "student", "seconds", "results": {seed: {"lab21/project0": {"arms": ...}}}}."""
    from . import reproduce as R
    from ..labs import lab21

    fp = R.model_fingerprint("student")
    path = WORK / "p0-splits" / f"{fp}-{split}-seeds{'_'.join(map(str, seeds))}.json"
    if path.exists():
        return json.loads(path.read_text())
    t = time.time()
    arms = {}
    for names, p, g in _split_arms(split):
        arms.update(lab21.run("project0", names, seeds=list(seeds), workers=workers, progress=False,
                              n_prompts=p, group_size=g))
    blob = {"split": split, "seeds": list(seeds), "student": shipped_student_step(), "seconds": round(time.time() - t, 1),
            "results": {str(s): {"lab21/project0": {"arms": {a: runs[i] for a, runs in arms.items()}}}
                        for i, s in enumerate(seeds)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(blob))
    log(f"[lab21-calibration] project0 split {split}: {blob['seconds']:.0f} s")
    return blob


def judge_split(blob: dict) -> dict:
    """Project 0's claims judged on one :func:`split_run`: a row with "split", "seeds", "student" and
    :func:`tally`'s counts."""
    from . import reproduce as R

    per_seed = {int(s): r for s, r in blob["results"].items()}
    outs = R.judge_all(project_claims("project0"), per_seed)
    return {"split": blob["split"], "seeds": blob["seeds"], "student": blob.get("student"),
            "seconds": blob.get("seconds"), **tally(outs, numeric=True)}


def choose_split(rows: Sequence[dict], current: str) -> dict:
    """Most qualitative claims held, then most held; a tie goes to ``current``, then to fewer prompts a step."""
    return min(rows, key=lambda r: (-r["qualitative_held"], -r["held"], r["split"] != current,
                                    int(r["split"].split("x")[0])))


def _split_key(r: dict):
    return (r.get("student") or 0, SPLITS.index(r["split"]) if r["split"] in SPLITS else len(SPLITS), r["split"])


def current_split() -> str:
    from ..labs import lab21

    return f"{lab21.P0_PROMPTS}x{lab21.P0_GROUP}"


# ------------------------------------------------------------------------------ the report
def _claims_table(rows: Sequence[dict], label) -> list[str]:
    lines = ["| claim | " + " | ".join(label(r) for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for i in sorted({i for r in rows for i in r["outcomes"]}):
        lines.append(f"| `{i}` | " + " | ".join(outcome_cell(r, i) for r in rows) + " |")
    return lines


def runs_report(rows: Sequence[dict]) -> list[str]:
    from ..store import shipped

    if not rows:
        return []
    best = choose_run(rows)
    seeds = next(r["seeds"] for r in rows if r.get("judged"))
    lines = ["## First search: the SFT run of the teacher and the student", "",
             "Each candidate is an SFT run of the course's recipe (`checkpoints.COURSE_SFT`: 1,200 steps of 64 rows, "
             "AdamW at 3e-3 after a 50-step warmup, cosine decay to a tenth) with the nonlinearity and the seed of "
             "its row. Its teacher is its last step; its student the snapshot nearest the published calibration "
             "(`llmrl.tools.rebuild_models.choose`: greedy 0.50, sampled 0.30 at T = 1, KL to the teacher 1.98; targets "
             f"{json.dumps({k: v[0] for k, v in shipped.TARGETS['student'].items()})}). A run whose nearest snapshot "
             f"is more than {MAX_DISTANCE:g} away is not judged. A judged run trains every lab21 experiment at the "
             "settings shipped when it was judged (Projects 1-5 at the published 3e-4, evaluation at T = 1, Project 0 "
             f"at {rows[0].get('p0_split', '32x2')}) on seeds {','.join(map(str, seeds))} (Project 1: 0-4, its "
             "notebook's), and every lab21 claim of `llmrl.tools.reproduce` is judged with its own tolerance. The rule: "
             "most claims held, then most qualitative claims held, then the student nearest the published "
             "calibration (why the count of claims comes first: the docstring of the module).", "",
             "| nonlinearity | SFT seed | student step | greedy | sampled T=1 | P0 pass@1 | KL to teacher | distance | "
             "held | qualitative | numeric |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=_run_key):
        c = r["calibration"]
        mark = " **(chosen)**" if r is best else ""
        counts = (f"{r['held']}/{r['total']} | {r['qualitative_held']}/{r['qualitative']} | "
                  f"{r['numeric_held']}/{r['numeric']}") if r.get("judged") else "not judged | | "
        lines.append(f"| {r['activation']}{mark} | {r['seed']} | {r['step']} | {c['greedy']:.3f} | "
                     f"{c['sampled_T1']:.3f} | {c.get('project0_pass@1', float('nan')):.3f} | "
                     f"{c.get('kl_to_teacher', float('nan')):.3f} | {r['distance']:.2f} | {counts} |")
    lines += ["", "Calibration columns: `llmrl.tools.rebuild_models.calibration` (1,000 problems; Project 0's start from 8 samples "
              "of 100).", ""]
    lines += [f"- {n}" for n in RUN_NOTES] + [""]
    judged = sorted((r for r in rows if r.get("judged")), key=_run_key)
    lines += ["### Claim by claim (mean over seeds; verdict)", ""]
    lines += _claims_table(judged, lambda r: f"{r['activation']} {r['seed']}/{r['step']}") + [""]
    return lines


def splits_report(rows: Sequence[dict], current: str) -> list[str]:
    if not rows:
        return []
    student = max(r.get("student") or 0 for r in rows)
    rows = [r for r in rows if (r.get("student") or 0) == student]
    best = choose_split(rows, current)
    lines = ["## Second search: how Project 0's 64 sequences a step split into prompts x samples", "",
             f"The shipped student (step {student}), Project 0's published learning rate (3e-4) and budget (200 "
             "steps of 64 sequences), which do not say how many prompts the 64 sequences come from. Each split is one "
             "training run of the four arms at seeds " + ",".join(map(str, rows[0]["seeds"])) + ", judged on Project "
             "0's claims with their own tolerances. `64x1+rl8x8`: the three distillation arms, which need no group, "
             "sample one answer for each of 64 prompts and the rl arm, whose advantage compares samples of one "
             "prompt, keeps 8 x 8. The rule, fixed before the search: most qualitative claims held, then most "
             f"held; a tie goes to the setting before the search ({current}), then to fewer prompts.", "",
             "| prompts x samples | held | qualitative | numeric | seconds |", "|---|---|---|---|---|"]
    for r in rows:
        mark = " **(chosen)**" if r is best else ""
        lines.append(f"| {r['split']}{mark} | {r['held']}/{r['total']} | {r['qualitative_held']}/{r['qualitative']} | "
                     f"{r['numeric_held']}/{r['numeric']} | {r['seconds'] if r['seconds'] is not None else ''} |")
    lines += ["", "### project0 (mean over seeds; verdict)", ""]
    return lines + _claims_table(rows, lambda r: r["split"]) + [""]


def write_report(path: Path = REPORT, split_before: str | None = None) -> None:
    """docs/lab21-calibration.md from the committed records."""
    runs, splits = _record("runs"), _record("p0-splits")
    lines = ["# lab21: calibrating what the published setting leaves open", "",
             "Written by `python -m llmrl.tools.lab21_calibration --report-only` from the judged rows committed in "
             "`docs/lab21-calibration/` (what was searched and why: the docstring of "
             "`lib/llmrl/tools/lab21_calibration.py`). The searches made before for the ReLU student (a snapshot "
             "of the course's run, a learning rate per project, Projects 4-5's evaluation temperature) are kept "
             f"as recorded in [{RELU_RECORD}]({RELU_RECORD}); their settings are no longer shipped.", ""]
    lines += runs_report(runs)
    lines += splits_report(splits, split_before or (splits[0].get("before") if splits else current_split()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.tools.lab21_calibration", description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", default=None, metavar="ACT:SEED",
                   help="the first search: these SFT runs (relu:0, gelu:2, ...), each judged on every lab21 claim")
    p.add_argument("--p0-splits", nargs="*", default=None, metavar="SPLIT",
                   help=f"the second search: Project 0 at these splits (default {' '.join(SPLITS)}) with the shipped student")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPORT)
    p.add_argument("--report-only", action="store_true", help="write the report from the committed records")
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    if a.runs:
        rows = []
        for act, seed in map(parse_run, a.runs):
            r = judge_run(act, seed, seeds, a.workers)
            r["p0_split"] = current_split()
            rows.append(r)
            counts = (f"{r['held']}/{r['total']} held (qualitative {r['qualitative_held']}/{r['qualitative']}, numeric "
                      f"{r['numeric_held']}/{r['numeric']})") if r["judged"] else "not judged (too far)"
            print(f"[lab21-calibration] {act} seed {seed}, student step {r['step']} (distance {r['distance']:.2f}): "
                  f"{counts}", flush=True)
            _save_record("runs", [r], _run_key)
        best = choose_run(_record("runs"))
        print(f"[lab21-calibration] chosen: {best['activation']} seed {best['seed']}, student step {best['step']}")
    if a.p0_splits is not None:
        rows = []
        for split in a.p0_splits or SPLITS:
            r = dict(judge_split(split_run(split, seeds, a.workers)), before=current_split())
            rows.append(r)
            print(f"[lab21-calibration] project0 {split}: {r['held']}/{r['total']} held (qualitative "
                  f"{r['qualitative_held']}/{r['qualitative']}, numeric {r['numeric_held']}/{r['numeric']})", flush=True)
        _save_record("p0-splits", rows, _split_key)
        print(f"[lab21-calibration] project0: chosen split {choose_split(rows, current_split())['split']}")
    write_report(a.out)
    print(f"[lab21-calibration] report in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
