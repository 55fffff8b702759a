"""Calibrate what lab21's published setting leaves open, by a small recorded search.

The published setting fixes the task, the budgets (steps; 16 prompts x 8 samples for Projects 1-5, 64
sequences a step for Project 0), the evaluation sizes it names (Project 4: 100 prompts x 16 samples),
the teacher and Project 0's optimiser (AdamW, 3e-4).
It leaves open which snapshot of our SFT run plays the student (the published one is "after about
300 SFT steps, about 50% greedy, 30% sampled" of another TinyLM), the learning rate of
Projects 1-5, and how Project 0's 64 sequences a step split into prompts x samples (the third
search, ``--p0-splits``). In the first search each candidate is a (student SFT step, Projects 1-5
learning rate) pair; for each, every lab21 claim of :mod:`llmrl.reproduce` is judged at seeds 0, 1, 2, with the claims'
tolerances untouched.

The rule, fixed before the search: a candidate must keep every qualitative claim; among those, the
most claims held (holds or within about) wins; a tie goes to the student nearest the published
calibration (:func:`llmrl.shipped.distance`), then to the smaller learning rate.

    python -m llmrl.labs.lab21_calibration --students 285 287 --lrs 3e-4 6e-4 --workers 2

Candidate students are taken from one SFT run of the course's recipe on this machine, after
checking that its snapshot at the shipped student's step equals the shipped file bit for bit (so
every candidate belongs to the same run as the shipped models). Results are cached under
``artifacts/lab21-calibration/`` (one folder per candidate, the :mod:`llmrl.reproduce` cache
format); the table goes to ``docs/lab21-calibration.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from ..utils import repo_root

ROOT = (repo_root() or Path.cwd())
WORK = ROOT / "artifacts" / "lab21-calibration"
REPORT = ROOT / "docs" / "lab21-calibration.md"
P0_EXPERIMENTS = ("lab21/models", "lab21/project0")  # do not depend on Projects 1-5's learning rate


# Candidates stopped before all their seeds ran, with what was measured (seed 0) when they were
# stopped: they count in the search but not in the table, whose rule compares complete candidates.
SCREENED = (
    ("student step 287, lr 3e-4", "stopped after Project 0 at seed 0: its greedy accuracy (0.605 on the "
     "200 claim problems) is outside the published 'about 0.50', and its RL arm did not learn (pass@1 0.344 "
     "-> 0.336)"),
    ("student step 285, lr 1e-3", "stopped after Project 3 at seed 0: the uniform arm collapsed (2d+2d_nocarry "
     "0.27 -> 0.01, 2d+2d_ge100 0.27 -> 0.04)"),
    ("student step 283, lr 6e-4", "stopped after Project 3 at seed 0 for time, once step 283 at 3e-4 had lost a "
     "qualitative claim (lab21.p3-target-only-drift; step 283's calibration distance is 4.91 against 2.06)"),
)


# What changed in the first search's numbers after it was recorded (its cached results are not rerun).
LATER_FIXES = ("Measured when the first search ran. A later fix of the stacked decoding (a seed whose rows finish "
               "early now leaves its generator where a run of that seed alone would) changed Project 3's draws: at "
               "285/6e-4 its learnability arm's sum >= 100 accuracy (`lab21.p3-learnability-ge100`) is now 0.407 in "
               "`make reproduce` (seeds 0-2, `docs/reproduction.md`) and 0.427 ± 0.034 in the projects notebook, "
               "not the 0.343 below, and it leads uniform by 0.137, not 0.073. Projects 4 and 5 at 6e-4, rerun in the "
               "second search, give the numbers below at T = 1 to the last digit.")


def candidate_states(steps: Sequence[int]) -> dict[int, dict]:
    """{step: state dict} of the course's SFT run at ``steps``; raises if the run does not give the
    shipped student back at its step (another machine's arithmetic: the candidates would not belong
    to the shipped models' run)."""
    from .. import shipped
    from ..checkpoints import COURSE_SFT, STUDENT_STEP

    cached = {s: WORK / "states" / f"step{s}.pt" for s in steps}
    if all(p.exists() for p in cached.values()):
        return {s: torch.load(p, weights_only=True) for s, p in cached.items()}
    keep = set(steps) | {STUDENT_STEP}
    _, states = shipped.train_keeping(COURSE_SFT, keep, progress=False)
    _, ref = shipped.load_state("student")
    if any(not torch.equal(states[STUDENT_STEP][k], ref[k]) for k in ref):
        raise RuntimeError(f"this machine's SFT run does not reproduce the shipped student at step {STUDENT_STEP}; "
                           "candidate students would come from another run")
    (WORK / "states").mkdir(parents=True, exist_ok=True)
    for s in steps:
        torch.save(states[s], cached[s])
    return {s: states[s] for s in steps}


def models_dir_for(step: int, state: dict) -> Path:
    """A copy of the shipped models folder whose student is ``state`` (manifest updated)."""
    from .. import shipped
    from ..tinylm import TinyLM
    from ..checkpoints import COURSE_SFT

    out = WORK / f"models-step{step}"
    if (out / shipped.MANIFEST_NAME).exists():
        return out
    tmp = WORK / f"models-step{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(shipped.MODELS_DIR, tmp)
    buf = io.BytesIO()
    torch.save(state, buf)
    (tmp / shipped.FILES["student"]).write_bytes(buf.getvalue())
    blob = json.loads((tmp / shipped.MANIFEST_NAME).read_text())
    model, teacher = TinyLM(COURSE_SFT.model), TinyLM(COURSE_SFT.model)
    model.load_state_dict(state)
    model.eval()
    teacher.load_state_dict(shipped.load_state("teacher")[1])
    teacher.eval()
    blob["models"]["student"].update(sha256=hashlib.sha256(buf.getvalue()).hexdigest(), bytes=len(buf.getvalue()),
                                     step=step, calibration=shipped.calibration(model, teacher))
    (tmp / shipped.MANIFEST_NAME).write_text(json.dumps(blob, indent=1) + "\n")
    tmp.rename(out)
    return out


def tally(outs, numeric: bool = False) -> dict:
    """A row's counts from :func:`llmrl.reproduce.judge_all` outcomes: claims held ("holds" or "within
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


def judge_candidate(step: int, lr: float, seeds: Sequence[int], workers: int = 1, log=print) -> dict:
    """Every lab21 claim for one candidate: {"step", "lr", "held", "total", "qualitative_held",
    "qualitative", "numeric_held", "numeric", "distance", "outcomes": {claim id: (mean, verdict)}}."""
    from .. import reproduce as R
    from .. import shipped
    from . import lab21

    state = candidate_states([step])[step]
    mdir = models_dir_for(step, state)
    old_dir, old_lr, old_exps = shipped.MODELS_DIR, lab21.PROJECT_LR, dict(R.EXPERIMENTS)
    shipped.MODELS_DIR, lab21.PROJECT_LR = mdir, {p: lr for p in old_lr}  # one lr for Projects 1-5
    R.EXPERIMENTS.update(R._experiments(lr))  # the lr in the settings: the cache keys of `make reproduce`
    try:
        claims = R.select(["lab21"])
        p0 = [c for c in claims if all(e in P0_EXPERIMENTS for e in c.experiments)]
        rest = [c for c in claims if c not in p0]
        opts = R.Options(workers=workers)
        out0, _ = R.evaluate_claims(p0, list(seeds), root=WORK / f"step{step}", opts=opts, log=log)
        out1, _ = R.evaluate_claims(rest, list(seeds), root=WORK / f"step{step}-lr{lr:g}", opts=opts, log=log)
        cal = shipped.manifest(mdir)["models"]["student"]["calibration"]
    finally:
        shipped.MODELS_DIR, lab21.PROJECT_LR = old_dir, old_lr
        R.EXPERIMENTS.clear()
        R.EXPERIMENTS.update(old_exps)
    return {"step": step, "lr": lr, "seeds": list(seeds), **tally(out0 + out1, numeric=True),
            "distance": round(shipped.distance(cal, "student"), 3), "calibration": cal}


def adopt(step: int, lr: float, seeds: Sequence[int], root: Path | None = None, log=print) -> int:
    """Copy a candidate's results into the :mod:`llmrl.reproduce` cache (``root``, default
    ``artifacts/reproduce``) under the keys of the current settings and shipped models, once the
    candidate ships (its student in ``lib/llmrl/models``, ``lr`` in every ``lab21.PROJECT_LR``): the same
    computations, not run twice. Each copied result must have been trained at ``lr`` (Projects 1-5)
    from a student whose fingerprint is the shipped one's. Returns how many results were copied."""
    from .. import reproduce as R
    from . import lab21

    if set(lab21.PROJECT_LR.values()) != {lr}:
        raise ValueError(f"lab21.PROJECT_LR is {lab21.PROJECT_LR}, not the candidate's {lr:g} for every project: "
                         "ship it first")
    root = R.cache_dir() if root is None else Path(root)
    fps = {m: R.model_fingerprint(m) for m in ("student", "teacher")}
    copied = 0
    for name, exp in R.EXPERIMENTS.items():
        if exp.lab != "lab21":
            continue
        src_root = WORK / (f"step{step}" if name in P0_EXPERIMENTS else f"step{step}-lr{lr:g}")
        for s in seeds:
            src = R._cache_path(exp, s, src_root)
            blob = json.loads(src.read_text())
            if blob["models"].get("student") != fps["student"]:
                raise ValueError(f"{src}: trained from another student than the shipped one")
            if name not in P0_EXPERIMENTS:
                lrs = {a["config"]["lr"] for a in blob["result"]["arms"].values()}
                if lrs != {lr}:
                    raise ValueError(f"{src}: trained at lr {sorted(lrs)}, not {lr:g}")
            blob["key"] = R._key(exp, fps)
            dst = R._cache_path(exp, s, root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(json.dumps(blob))
            copied += 1
    log(f"[lab21-calibration] {copied} results of student step {step}, lr {lr:g} copied into {root}")
    return copied


# ------------------------------------------------------------- per-project learning rate and evaluation temperature
# The second search (session 24): with the shipped student, each of Projects 1-5 its own learning rate, and
# Projects 4-5 their evaluation's sampling temperature (training still samples at T = 1). A project's claims
# read only its own experiment, so the search runs project by project; one training run per (project, lr) is
# evaluated at every temperature (``more_temperatures``: the same trained model, draws of its own per T).
SWEEP = WORK / "sweep"
# The settings before the second search (its ties go to the nearest of these): (lr, evaluation temperature).
BEFORE = {f"project{i}": (6e-4, 1.0) for i in range(1, 6)}
TEMPERATURE_PROJECTS = ("project4", "project5")


def project_claims(project: str) -> list:
    from .. import reproduce as R

    return [c for c in R.select(["lab21"]) if c.experiments == (f"lab21/{project}",)]


def sweep_path(project: str, lr: float, seeds: Sequence[int]) -> Path:
    return SWEEP / f"{project}-lr{lr:g}-seeds{'_'.join(map(str, seeds))}.json"


def sweep_run(project: str, lr: float, seeds: Sequence[int], temperatures: Sequence[float] = (), workers: int = 1,
              log=print) -> dict:
    """One (project, lr) training run at ``seeds`` (cached in :func:`sweep_path`): {"results": {seed:
    {experiment: result}}, "temperatures", "seconds"}; Projects 4-5 also evaluated at ``temperatures``."""
    from .. import reproduce as R
    from . import lab21

    path = sweep_path(project, lr, seeds)
    temps = sorted({1.0, *temperatures}) if project in TEMPERATURE_PROJECTS else [1.0]
    if path.exists():
        blob = json.loads(path.read_text())
        if set(temps) <= set(blob["temperatures"]):
            return blob
    kw = {"eval_temperature": 1.0, "more_temperatures": [t for t in temps if t != 1.0]} \
        if project in TEMPERATURE_PROJECTS else {}
    t = time.time()
    res = lab21.run(project, R.LAB21_ARMS.get(project), seeds=list(seeds), workers=workers, progress=False, lr=lr, **kw)
    blob = {"project": project, "lr": lr, "seeds": list(seeds), "temperatures": temps,
            "seconds": round(time.time() - t, 1),
            "results": {str(s): {f"lab21/{project}": {"arms": {a: runs[i] for a, runs in res.items()}}}
                        for i, s in enumerate(seeds)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(blob))
    log(f"[lab21-calibration] {project} lr {lr:g}: {blob['seconds']:.0f} s")
    return blob


def sweep_from_cache(project: str, seeds: Sequence[int], root: Path, log=print) -> dict:
    """A :func:`sweep_run` record (T = 1 only) from a :mod:`llmrl.reproduce` cache at ``root`` (e.g. main's
    ``artifacts/reproduce``): the shipped setting's runs, not computed twice. Each seed's result must come
    from the shipped student and one learning rate."""
    from .. import reproduce as R

    exp = R.EXPERIMENTS[f"lab21/{project}"]
    fp = R.model_fingerprint("student")
    results, lrs, computed = {}, set(), []
    for s in seeds:
        blob = json.loads(R._cache_path(exp, s, Path(root)).read_text())
        if blob["models"].get("student") != fp:
            raise ValueError(f"{root}: {exp.name} seed {s} was trained from another student than the shipped one")
        lrs |= {a["config"]["lr"] for a in blob["result"]["arms"].values()}
        results[str(s)] = {exp.name: blob["result"]}
        computed.append(blob["computed"])
    if len(lrs) != 1:
        raise ValueError(f"{root}: {exp.name} mixes learning rates {sorted(lrs)}")
    lr = lrs.pop()
    out = {"project": project, "lr": lr, "seeds": list(seeds), "temperatures": [1.0], "results": results,
           "source": f"llmrl.reproduce cache, computed {min(computed)} to {max(computed)}"}
    path = sweep_path(project, lr, seeds)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    log(f"[lab21-calibration] {project} lr {lr:g}: read from {root}")
    return out


def at_temperature(result: dict, project: str, t: float) -> dict:
    """A project's result as if evaluated at ``t`` (one of its ``more_temperatures``; 1.0: as run)."""
    if t == 1.0:
        return result
    out = json.loads(json.dumps(result))
    for run in out["arms"].values():
        if project == "project4":
            sfx = f"@T{t:g}"
            for k in [k for k in run["evals"] if k.endswith(sfx)]:
                run["evals"][k[:-len(sfx)]] = run["evals"][k]
        else:
            run["extra"].update(run["extra"]["at_temperature"][f"{t:g}"])
    return out


def judge_sweep(blob: dict, t: float = 1.0) -> dict:
    """The project's claims judged for one (lr, temperature) of a :func:`sweep_run`: a row as in
    :func:`judge_candidate` (plus "project", "temperature")."""
    from .. import reproduce as R

    project = blob["project"]
    name = f"lab21/{project}"
    per_seed = {int(s): {name: at_temperature(r[name], project, t)} for s, r in blob["results"].items()}
    outs = R.judge_all(project_claims(project), per_seed)
    return {"project": project, "lr": blob["lr"], "temperature": t, "seeds": blob["seeds"], **tally(outs)}


def choose_per_project(rows: Sequence[dict], current: dict[str, tuple[float, float]]) -> dict[str, dict]:
    """{project: winning row}: every qualitative claim of the project kept, then most held; a tie goes to
    the setting nearest ``current`` = {project: (lr, temperature)} (the lr's ratio first, then |T - T_now|)."""
    best = {}
    for project in sorted({r["project"] for r in rows}):
        mine = [r for r in rows if r["project"] == project]
        ok = [r for r in mine if r["qualitative_held"] == r["qualitative"]] or mine
        lr0, t0 = current[project]
        best[project] = min(ok, key=lambda r: (-r["held"], abs(math.log(r["lr"] / lr0)), abs(r["temperature"] - t0)))
    return best


# What to know about the second search's winners (read off its tables; shipped in lab21.PROJECT_LR and
# lab21.EVAL_TEMPERATURE).
SECOND_NOTES = (
    "Searched: Project 1 at 3.5e-4 to 6e-4, Project 2 at 3e-4 to 6e-4, Project 3 at 4e-4 and 6e-4, Project 4 "
    "at 3e-4, 6e-4 and 8e-4, Project 5 at 3e-4 to 1e-3, the runs of Projects 4-5 evaluated at T = 0.5 to 1 (about "
    "20 minutes of wall time at load 4-6). The 6e-4 runs of Projects 1-3 are the `make reproduce` ones "
    "(`--from-cache`).",
    "Several wins are one claim on a tolerance's edge, so they may not survive other seeds: Project 1's 4e-4 "
    "holds the symmetric arm's pass@1 at 0.504 (bound 0.50; the projects notebook, with seeds 0-4, prints 0.491); "
    "Project 2's 4e-4 is an island (its neighbours 3e-4 and 5e-4 hold 5, as 6e-4 does); Project 5's pass@64 after "
    "RL at T = 0.7 is 0.950, the bound of 0.92 ± 0.03, and its crossing k is 50, 29 and 6 on seeds 0-2 (mean 28, "
    "inside 16-32). Project 4 at 8e-4 and T = 0.7 holds all 7 with room, and 8e-4 holds 5 of 7 even at T = 1.",
    "Project 5 at 1e-3 held as many as 6e-4 (6 of 7 at T = 0.7 and 0.8, with pass@64 after RL at 0.90-0.92, "
    "nearer the published 0.92, but pass@1 after RL 0.41-0.43); the rule's tie-break kept 6e-4.",
)


def sweep_rows(seeds: Sequence[int]) -> list[dict]:
    """Every recorded (project, lr, temperature) of the second search at ``seeds``, judged."""
    rows = []
    for f in sorted(SWEEP.glob(f"project*-seeds{'_'.join(map(str, seeds))}.json")):
        blob = json.loads(f.read_text())
        rows += [dict(judge_sweep(blob, t), source=blob.get("source", f"trained ({blob.get('seconds', 0):.0f} s)"))
                 for t in blob["temperatures"]]
    return rows


def sweep_report(rows: Sequence[dict], current: dict[str, tuple[float, float]]) -> list[str]:
    """The second search's section of docs/lab21-calibration.md (markdown lines)."""
    if not rows:
        return []
    best = choose_per_project(rows, current)
    lines = ["## Second search: a learning rate per project, and Projects 4-5's evaluation temperature", "",
             "The shipped student (step 285). Each of Projects 1-5 may take its own learning rate, and Projects 4 "
             "and 5 the sampling temperature of their evaluation (pass@k; training still samples at T = 1, and the "
             "student-level claims stay at T = 1). A project's claims read only its own runs, so the search is "
             "run and judged project by project; one training run per (project, lr) is evaluated at every "
             "temperature. The rule, as in the first search and fixed before it: keep every qualitative claim of "
             "the project, hold the most claims; a tie goes to the setting nearest the current one (lr "
             + ", ".join(f"Project {p[-1]} {lr:g}" for p, (lr, _) in sorted(current.items())) + "; T = 1): the lr's ratio "
             "first, then the temperature. Seeds " + ",".join(map(str, rows[0]["seeds"])) + "; every claim with "
             "its own tolerance from `llmrl.reproduce`.", "",
             "| project | lr | eval T | held | qualitative | source |", "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["project"], r["lr"], r["temperature"])):
        mark = " **(chosen)**" if r is best[r["project"]] else ""
        lines.append(f"| {r['project']}{mark} | {r['lr']:g} | {r['temperature']:g} | {r['held']}/{r['total']} | "
                     f"{r['qualitative_held']}/{r['qualitative']} | {r['source']} |")
    now = sum(next((r["held"] for r in rows if r["project"] == p and (r["lr"], r["temperature"]) == current[p]), 0)
              for p in best)
    lines += ["", f"Held over the projects searched: {now} at the settings before this search, "
              f"{sum(b['held'] for b in best.values())} at the chosen ones.", ""]
    lines += [f"- {n}" for n in SECOND_NOTES] + [""]
    for project in sorted(best):
        mine = sorted((r for r in rows if r["project"] == project), key=lambda r: (r["lr"], r["temperature"]))
        lines += [f"### {project} (mean over seeds; verdict)", "",
                  "| claim | " + " | ".join(f"{r['lr']:g}, T {r['temperature']:g}" for r in mine) + " |",
                  "|---|" + "---|" * len(mine)]
        for i in sorted({i for r in mine for i in r["outcomes"]}):
            lines.append(f"| `{i}` | " + " | ".join(outcome_cell(r, i) for r in mine) + " |")
        lines.append("")
    return lines


# ------------------------------------------------------------------------------ Project 0's prompts x samples
# The third search (session 25): how Project 0's published 64 sequences a step split into prompts x samples per
# prompt. The split is a setting of the run, not of the student: one training run per split at seeds 0-2 with the
# shipped student, judged on Project 0's claims. "64x1+rl8x8" gives the three distillation arms (which need no
# group) 64 prompts of one sample and the rl arm, whose advantage needs a group, 8 x 8.
SPLITS_DIR = WORK / "p0-splits"
SPLITS = ("8x8", "16x4", "32x2", "64x1+rl8x8")
SPLIT_BEFORE = "8x8"  # the setting before the third search (the trainer's group of 8)
THIRD_TITLE = "## Third search: how Project 0's 64 sequences a step split into prompts x samples"


def _split_arms(split: str) -> list[tuple[tuple[str, ...], int, int]]:
    """[(arms, prompts, samples per prompt)] of a split name (see :data:`SPLITS`)."""
    from . import lab21

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


def split_path(split: str, seeds: Sequence[int]) -> Path:
    return SPLITS_DIR / f"{split}-seeds{'_'.join(map(str, seeds))}.json"


def split_run(split: str, seeds: Sequence[int], workers: int = 1, log=print) -> dict:
    """Project 0 at one split, seeds trained together (cached in :func:`split_path`): {"split", "seeds",
    "seconds", "results": {seed: {"lab21/project0": {"arms": ...}}}}."""
    from . import lab21

    path = split_path(split, seeds)
    if path.exists():
        return json.loads(path.read_text())
    t = time.time()
    arms = {}
    for names, p, g in _split_arms(split):
        arms.update(lab21.run("project0", names, seeds=list(seeds), workers=workers, progress=False,
                              n_prompts=p, group_size=g))
    blob = {"split": split, "seeds": list(seeds), "seconds": round(time.time() - t, 1),
            "results": {str(s): {"lab21/project0": {"arms": {a: runs[i] for a, runs in arms.items()}}}
                        for i, s in enumerate(seeds)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(blob))
    log(f"[lab21-calibration] project0 split {split}: {blob['seconds']:.0f} s")
    return blob


def judge_split(blob: dict) -> dict:
    """Project 0's claims judged on one :func:`split_run`: a row with "split", "seeds" and :func:`tally`'s counts."""
    from .. import reproduce as R

    per_seed = {int(s): r for s, r in blob["results"].items()}
    outs = R.judge_all(project_claims("project0"), per_seed)
    return {"split": blob["split"], "seeds": blob["seeds"], "seconds": blob.get("seconds"), **tally(outs, numeric=True)}


def choose_split(rows: Sequence[dict], current: str = SPLIT_BEFORE) -> dict:
    """Every qualitative claim kept, then most held; a tie goes to ``current``, then to fewer prompts a step."""
    ok = [r for r in rows if r["qualitative_held"] == r["qualitative"]] or list(rows)
    return min(ok, key=lambda r: (-r["held"], r["split"] != current, int(r["split"].split("x")[0])))


def split_rows(seeds: Sequence[int]) -> list[dict]:
    return [judge_split(json.loads(f.read_text())) for f in sorted(SPLITS_DIR.glob(f"*-seeds{'_'.join(map(str, seeds))}.json"))]


def split_report(rows: Sequence[dict]) -> list[str]:
    """The third search's section of docs/lab21-calibration.md (markdown lines)."""
    if not rows:
        return []
    best = choose_split(rows)
    order = sorted(rows, key=lambda r: SPLITS.index(r["split"]) if r["split"] in SPLITS else len(SPLITS))
    lines = [THIRD_TITLE, "",
             "The shipped student (step 285), Project 0's published learning rate (3e-4) and budget (200 steps of 64 "
             "sequences). The published setup does not say how many prompts the 64 sequences come from. Each split "
             "is one training run of the four arms at seeds " + ",".join(map(str, rows[0]["seeds"])) + ", judged on "
             "Project 0's claims with their own tolerances from `llmrl.reproduce`. `64x1+rl8x8`: the three "
             "distillation arms, which need no group, sample one answer for each of 64 prompts and the rl arm, whose "
             "advantage compares samples of one prompt, keeps 8 x 8. The rule, fixed before the search: keep every "
             "qualitative claim, hold the most claims; a tie goes to the setting before the search (8 x 8), then "
             "to fewer prompts.", "",
             "| prompts x samples | held | qualitative | numeric | seconds |", "|---|---|---|---|---|"]
    for r in order:
        mark = " **(chosen)**" if r is best else ""
        lines.append(f"| {r['split']}{mark} | {r['held']}/{r['total']} | {r['qualitative_held']}/{r['qualitative']} | "
                     f"{r['numeric_held']}/{r['numeric']} | {r['seconds'] if r['seconds'] is not None else ''} |")
    lines += ["", "More prompts a step show the distillation arms more of the states the student visits, and they "
              "learn faster for it; with one sample per prompt their KL to the teacher overshoots the published "
              "values, and the rl arm learns little at any split (its best, 16 x 4, ends at pass@1 0.40 against "
              "0.54). The learning rate is not what held the arms back at 8 x 8: measured beside this search (seeds "
              "0-2), opd-full ends at pass@1 0.421 at 6e-4 against 0.419 at 3e-4.", "",
              "### project0 (mean over seeds; verdict)", "",
              "| claim | " + " | ".join(r["split"] for r in order) + " |", "|---|" + "---|" * len(order)]
    for i in sorted({i for r in order for i in r["outcomes"]}):
        lines.append(f"| `{i}` | " + " | ".join(outcome_cell(r, i) for r in order) + " |")
    return lines + [""]


def replace_section(path: Path, title: str, lines: Sequence[str]) -> None:
    """Put ``lines`` (a section starting with ``title``) into the markdown file at ``path`` in place of its
    section of that title, or at its end: the other sections, whose recorded runs may live on another
    machine, stay as they are."""
    text = path.read_text() if path.exists() else ""
    head, sep, rest = text.partition(title)
    if sep:
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
        body = head.rstrip("\n") + "\n\n" + "\n".join(lines).rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    else:
        body = text.rstrip("\n") + "\n\n" + "\n".join(lines).rstrip("\n") + "\n"
    path.write_text(body.lstrip("\n"))


def choose(rows: Sequence[dict]) -> dict:
    """The rule (module docstring): every qualitative claim kept, then most held, then nearest the
    published calibration, then the smaller learning rate."""
    ok = [r for r in rows if r["qualitative_held"] == r["qualitative"]] or list(rows)
    return min(ok, key=lambda r: (-r["held"], r["distance"], r["lr"]))


def write_report(rows: Sequence[dict], path: Path = REPORT, extra: Sequence[str] = ()) -> None:
    """The first search's table, then ``extra`` (markdown lines: the second search's section)."""
    from .. import shipped

    best = choose(rows)
    ids = sorted({i for r in rows for i in r["outcomes"]})
    lines = ["# lab21: calibrating what the published setting leaves open", "",
             f"Written by `python -m llmrl.labs.lab21_calibration` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f" (seeds {','.join(map(str, rows[0]['seeds']))}). What was searched and the rule are in "
             "`lib/llmrl/labs/lab21_calibration.py`: a candidate is a student snapshot (the step of the course's "
             "SFT run) and the learning rate of Projects 1-5 (Project 0's 3e-4 is published and stays); every lab21 "
             "claim of `docs/reproduction.md` is judged with its own tolerance; the winner keeps every qualitative "
             "claim and holds the most claims (ties: the student nearest the published calibration, then the "
             "smaller learning rate).", "",
             "| student step | greedy | sampled T=1 | P0 pass@1 | KL to teacher | distance | lr (P1-5) | held | "
             "qualitative | numeric |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["step"], r["lr"])):
        c = r["calibration"]
        mark = " **(chosen)**" if r is best else ""
        lines.append(f"| {r['step']}{mark} | {c['greedy']:.3f} | {c['sampled_T1']:.3f} | {c.get('project0_pass@1', float('nan')):.3f} | "
                     f"{c.get('kl_to_teacher', float('nan')):.3f} | {r['distance']:.2f} | {r['lr']:g} | {r['held']}/{r['total']} | "
                     f"{r['qualitative_held']}/{r['qualitative']} | {r['numeric_held']}/{r['numeric']} |")
    lines += ["", f"Calibration columns: `llmrl.shipped.calibration` (1,000 problems; Project 0's start from 8 samples "
              f"of 100); distance: `llmrl.shipped.distance` to the published student (greedy 0.50, sampled 0.30, KL "
              f"1.98; targets {json.dumps({k: v[0] for k, v in shipped.TARGETS['student'].items()})}).", ""]
    if SCREENED:
        lines += ["Stopped early (not in the table; seed 0 only):", ""]
        lines += [f"- {who}: {why}." for who, why in SCREENED]
        lines += [""]
    lines += ["## Claim by claim (mean over seeds; verdict)", "", LATER_FIXES, "",
              "| claim | " + " | ".join(f"{r['step']}/{r['lr']:g}" for r in rows) + " |",
              "|---|" + "---|" * len(rows)]
    for i in ids:
        lines.append(f"| `{i}` | " + " | ".join(outcome_cell(r, i) for r in rows) + " |")
    if extra:
        lines += [""] + list(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.labs.lab21_calibration", description=__doc__.split("\n")[0])
    p.add_argument("--students", type=int, nargs="+", default=[285])
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-4])
    p.add_argument("--pairs", nargs="*", default=[], help="extra step:lr candidates, e.g. 287:6e-4")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPORT)
    p.add_argument("--report-only", action="store_true", help="rewrite the table from the recorded candidates")
    p.add_argument("--sweep", nargs="+", default=None, metavar="PROJECT",
                   help="the second search: these projects (project1..project5) with the shipped student, one "
                        "run per --lrs value, Projects 4-5 evaluated at every --temperatures value")
    p.add_argument("--temperatures", type=float, nargs="*", default=[])
    p.add_argument("--from-cache", type=Path, default=None,
                   help="with --sweep: record the projects' runs from this llmrl.reproduce cache instead of training")
    p.add_argument("--p0-splits", nargs="*", default=None, metavar="SPLIT",
                   help=f"the third search: Project 0 at these prompts x samples splits (default {' '.join(SPLITS)}); "
                        "writes its section of the report and leaves the others as they are")
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    if a.p0_splits is not None:
        for split in a.p0_splits or SPLITS:
            r = judge_split(split_run(split, seeds, a.workers))
            print(f"[lab21-calibration] project0 {split}: {r['held']}/{r['total']} held (qualitative "
                  f"{r['qualitative_held']}/{r['qualitative']}, numeric {r['numeric_held']}/{r['numeric']})", flush=True)
        rows = split_rows(seeds)
        replace_section(a.out, THIRD_TITLE, split_report(rows))
        print(f"[lab21-calibration] project0: chosen split {choose_split(rows)['split']}; section in {a.out}")
        return 0
    if a.sweep is not None:
        for project in a.sweep if a.from_cache else ():
            blob = sweep_from_cache(project, seeds, a.from_cache)
            r = judge_sweep(blob)
            print(f"[lab21-calibration] {project} lr {blob['lr']:g} (cached): {r['held']}/{r['total']} held "
                  f"(qualitative {r['qualitative_held']}/{r['qualitative']})", flush=True)
        for project in a.sweep if not a.from_cache else ():
            for lr in a.lrs:
                blob = sweep_run(project, lr, seeds, a.temperatures, a.workers)
                for t in blob["temperatures"]:
                    r = judge_sweep(blob, t)
                    print(f"[lab21-calibration] {project} lr {lr:g} T {t:g}: {r['held']}/{r['total']} held "
                          f"(qualitative {r['qualitative_held']}/{r['qualitative']})", flush=True)
        a.report_only = True
    pairs = [(s, lr) for s in a.students for lr in a.lrs]
    pairs += [(int(x.split(":")[0]), float(x.split(":")[1])) for x in a.pairs]
    rows_dir = WORK / "rows"  # one file per candidate: parallel searches do not overwrite each other
    rows_dir.mkdir(parents=True, exist_ok=True)
    if not a.report_only:
        candidate_states(sorted({s for s, _ in pairs}))
    for step, lr in ([] if a.report_only else pairs):
        r = judge_candidate(step, lr, seeds, a.workers)
        print(f"[lab21-calibration] student step {step}, lr {lr:g}: {r['held']}/{r['total']} held "
              f"(qualitative {r['qualitative_held']}/{r['qualitative']}, numeric {r['numeric_held']}/{r['numeric']})",
              flush=True)
        (rows_dir / f"step{step}-lr{lr:g}-seeds{'_'.join(map(str, seeds))}.json").write_text(json.dumps(r))
    rows = [json.loads(f.read_text()) for f in sorted(rows_dir.glob("*.json"))]
    rows = [r for r in rows if r["seeds"] == seeds]
    second = sweep_rows(seeds)
    write_report(rows, a.out, sweep_report(second, BEFORE) + split_report(split_rows(seeds)))
    for project, r in choose_per_project(second, BEFORE).items() if second else ():
        print(f"[lab21-calibration] {project}: chosen lr {r['lr']:g}, evaluation T {r['temperature']:g} "
              f"({r['held']}/{r['total']})")
    best = choose(rows)
    print(f"[lab21-calibration] chosen: student step {best['step']}, lr {best['lr']:g} ({best['held']}/{best['total']}); "
          f"table in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
