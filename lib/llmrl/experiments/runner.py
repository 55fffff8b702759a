"""One runner for arms x seeds, with one result schema: lab21's projects, lab19's stored runs, hw4's ablation.

An experiment is a function ``arm_fn(arm, seed, **kwargs) -> result`` that trains one arm from a
fresh start, or, marked with :func:`seeds_together`, ``arm_fn(arm, seeds, **kwargs) -> [result
per seed]`` that trains a list of seeds as one computation (``rl_train(..., seeds=seeds)``: the
seeds of an arm cost little more than one). :func:`run_arms` runs every (arm, seed) job (or
(arm, seeds) job), in parallel processes when ``workers > 1`` (forked, so a notebook's lambdas and
the student's functions need no pickling; one thread each), writes each result to
``<out_dir>/<experiment>/<arm>_seed<seed>.json`` when ``out_dir`` is given, and returns ``{arm:
[result per seed]}``. :func:`load_results` reads such a folder back, from any working directory
(:func:`results_dir`).

The result schema, plain JSON::

    {"experiment": "lab21/project0", "arm": "opd-full", "seed": 0,
     "config": {...},                                         # the settings of the run
     "curve": {"step": [1, 2, ...], <metric>: [...]},         # every training step
     "evals": {"step": [0, 50, ...], <metric>: [...]},        # step 0, every eval_every, the last step
     "extra": {...},                                          # what the experiment adds (pass@k curves, ...)
     "key": "..."}                                            # optional: a hash of what determines the numbers

:func:`result_from_history` makes one from a :class:`llmrl.rl.run.History`: training metrics go to
``curve``, evaluation metrics (``eval_<name>``) to ``evals`` under ``<name>``. Metric names:
:data:`llmrl.rl.metrics.METRICS`.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..utils import check_int, mean_sd, repo_root, set_threads


def results_dir() -> Path:
    """Where results are written and found: ``$LLMRL_RESULTS``, else ``artifacts/results`` at the
    root of the repository the library runs from (an editable install), else under the current
    folder. The same absolute folder from the repository root, a notebook's folder or anywhere."""
    env = os.environ.get("LLMRL_RESULTS")
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "artifacts" / "results"


def _number(x):
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return None if math.isnan(x) else x


def result_from_history(history, config: dict | None = None, curve: Sequence[str] | None = None,
                        extra: dict | None = None) -> dict:
    """A result (schema above, without experiment, arm and seed) from a History of step records.

    ``curve``: the training metrics to keep (default every numeric one); evaluation metrics are
    the records' ``eval_<name>`` keys, at the steps where they were measured."""
    train = [r for r in history if r.get("step", 0) >= 1]
    names = list(curve) if curve is not None else [
        k for k in dict.fromkeys(k for r in train for k in r)
        if k != "step" and not k.startswith("eval_") and all(isinstance(r.get(k, 0.0), (int, float)) for r in train)]
    out_curve = {"step": [int(r["step"]) for r in train]}
    for n in names:
        if any(n in r for r in train):
            out_curve[n] = [_number(r.get(n, float("nan"))) for r in train]
    evals = [r for r in history if any(k.startswith("eval_") for k in r)]
    eval_names = list(dict.fromkeys(k for r in evals for k in r if k.startswith("eval_")))
    out_evals = {"step": [int(r["step"]) for r in evals]}
    for n in eval_names:
        out_evals[n[len("eval_"):]] = [_number(r.get(n, float("nan"))) for r in evals]
    return {"config": dict(config or {}), "curve": out_curve, "evals": out_evals, "extra": dict(extra or {})}


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, (tuple, set)):
        return list(x)
    return repr(x)


def _path(out_dir, experiment: str, arm: str, seed: int) -> Path:
    return Path(out_dir) / experiment / f"{arm}_seed{seed}.json"


def seeds_together(arm_fn: Callable) -> Callable:
    """Mark ``arm_fn(arm, seeds: list[int], **kwargs) -> [result per seed]`` as training its seeds as
    one computation: :func:`run_arms` then gives it all of an arm's seeds at once (split among
    ``workers`` when there are fewer arms than workers)."""
    arm_fn.seeds_together = True
    return arm_fn


_JOBS: list = []  # filled before forking workers, so closures need no pickling


def _finish(res, experiment: str, arm: str, seed: int) -> dict:
    res = dict(res)
    for k in ("config", "curve", "evals", "extra"):
        res.setdefault(k, {})
    res.update(experiment=experiment, arm=arm, seed=seed)
    return res


def _run_job(i: int) -> list[dict]:
    experiment, arm_fn, arm, seeds, kwargs = _JOBS[i]
    set_threads(1)
    torch.manual_seed(seeds[0])
    if getattr(arm_fn, "seeds_together", False):
        out = list(arm_fn(arm, list(seeds), **kwargs))
        if len(out) != len(seeds):
            raise ValueError(f"{experiment}/{arm}: the arm function returned {len(out)} results for seeds {seeds}")
        return [_finish(r, experiment, arm, s) for r, s in zip(out, seeds)]
    return [_finish(arm_fn(arm, seeds[0], **kwargs), experiment, arm, seeds[0])]


def _chunks(seeds: list[int], k: int) -> list[list[int]]:
    """``seeds`` in ``k`` nearly equal consecutive parts."""
    k = max(1, min(k, len(seeds)))
    size, extra = divmod(len(seeds), k)
    out, i = [], 0
    for j in range(k):
        n = size + (j < extra)
        out.append(seeds[i:i + n])
        i += n
    return out


def run_arms(experiment: str, arm_fn: Callable, arms: Sequence[str], seeds: Sequence[int] = (0,), *,
             workers: int = 1, out_dir=None, progress: bool = True, resume_key: Callable | None = None,
             **kwargs) -> dict[str, list[dict]]:
    """Run ``arm_fn(arm, seed, progress=..., **kwargs)`` for every arm and seed; {arm: [result per seed]}.

    An arm function marked with :func:`seeds_together` is called as ``arm_fn(arm, seeds, ...)``
    with all of an arm's seeds (those not read back), split into as many parts as there are
    workers to spare per arm. ``workers > 1`` forks that many processes. ``out_dir`` writes each
    result as JSON under ``out_dir/experiment/``. ``resume_key(arm, seed) -> str``: a job whose
    stored result carries that ``key`` is read back instead of being run again (an interrupted
    sweep continues)."""
    arms = tuple([arms] if isinstance(arms, str) else arms)
    if not arms:
        raise ValueError("arms must name at least one arm")
    seeds = [check_int("seed", s, minimum=0) for s in ([seeds] if isinstance(seeds, int) else seeds)]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    check_int("workers", workers, minimum=1)
    results, todo, left = {}, [], {a: [] for a in arms}
    for s in seeds:
        for a in arms:
            path = _path(out_dir, experiment, a, s) if out_dir is not None else None
            if resume_key is not None and path is not None and path.exists():
                try:
                    old = json.loads(path.read_text())
                except json.JSONDecodeError:
                    old = {}
                if old.get("key") == resume_key(a, s):
                    results[(a, s)] = old
                    continue
            left[a].append(s)
    job_kwargs = dict(kwargs, progress=progress and workers == 1)
    if getattr(arm_fn, "seeds_together", False):
        per_arm = max(1, workers // max(1, sum(1 for a in arms if left[a])))
        for a in arms:
            if left[a]:
                todo += [(experiment, arm_fn, a, part, job_kwargs) for part in _chunks(left[a], per_arm)]
    else:
        todo = [(experiment, arm_fn, a, [s], job_kwargs) for s in seeds for a in arms if s in left[a]]
    global _JOBS
    _JOBS = todo
    try:
        if workers == 1 or len(todo) <= 1:
            done = [_run_job(i) for i in range(len(todo))]
        else:
            with mp.get_context("fork").Pool(min(workers, len(todo))) as pool:
                it = pool.imap(_run_job, range(len(todo)))
                if progress:
                    from tqdm.auto import tqdm
                    it = tqdm(it, total=len(todo), desc=experiment, leave=False)
                done = list(it)
    finally:
        _JOBS = []
    for res in (r for job in done for r in job):
        if resume_key is not None:
            res["key"] = resume_key(res["arm"], res["seed"])
        results[(res["arm"], res["seed"])] = res
        if out_dir is not None:
            path = _path(out_dir, experiment, res["arm"], res["seed"])
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(res, default=_json_default))
            os.replace(tmp, path)
    return {a: [json.loads(json.dumps(results[(a, s)], default=_json_default)) for s in seeds] for a in arms}


def load_results(experiment: str, out_dir=None) -> dict[str, list[dict]]:
    """Read ``out_dir/experiment/*.json`` back into {arm: [results sorted by seed]} ({} if none);
    ``out_dir`` defaults to :func:`results_dir`."""
    d = Path(out_dir if out_dir is not None else results_dir()) / experiment
    out: dict[str, list[dict]] = {}
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        res = json.loads(f.read_text())
        out.setdefault(res["arm"], []).append(res)
    for v in out.values():
        v.sort(key=lambda r: r["seed"])
    return out


def final(results: dict[str, list[dict]], metric: str, where: str = "evals") -> dict[str, tuple[float, float]]:
    """{arm: (mean, sample standard deviation over seeds, :func:`llmrl.utils.mean_sd`)} of the last
    recorded value of ``metric``."""
    out = {}
    for arm, runs in results.items():
        vals = []
        for r in runs:
            s = [v for v in r[where].get(metric, []) if v is not None]
            if s:
                vals.append(s[-1])
        if vals:
            out[arm] = mean_sd(vals)
    return out


def start_value(results: dict[str, list[dict]], metric: str) -> float:
    """Mean over all runs of the step-0 evaluation of ``metric``."""
    vals = [r["evals"][metric][0] for runs in results.values() for r in runs if metric in r["evals"]]
    return float(np.mean(vals)) if vals else float("nan")


def summary_table(results: dict[str, list[dict]], metrics: Sequence[str], expected: dict | None = None) -> str:
    """A text table: per arm, start -> end (mean +- std over seeds) of each metric, the published
    value (``expected``) beside it in a column headed "published".

    Each column is as wide as its longest entry, so that a three-metric table fits a notebook's width.
    """
    expected = expected or {}
    header = ["arm"]
    for m in metrics:
        header += [f"{m} start->end", "published"]
    rows = []
    for arm, runs in results.items():
        row = [arm]
        for m in metrics:
            starts = [r["evals"][m][0] for r in runs if m in r["evals"] and r["evals"][m][0] is not None]
            end = final({arm: runs}, m).get(arm)
            if end is None:
                row += ["-", ""]
                continue
            s = f"{np.mean(starts):.3f} -> {end[0]:.3f}" + (f" ± {end[1]:.3f}" if len(runs) > 1 else "")
            e = expected.get(arm, {}).get(m)
            row += [s, f"{e:.3f}" if isinstance(e, (int, float)) else "-"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join(fmt(r).rstrip() for r in [header] + rows)
