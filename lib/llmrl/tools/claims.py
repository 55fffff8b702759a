"""The published claims as data: ``claims.json`` (beside this module), its checker and loader.

:func:`validate` checks every entry of the file (the fields and their types, ids unique, the
check's kind known and its bounds present, every '@NAME' a known reason, every experiment known,
a measure for every claim and a claim for every measure, every claim's own reason it could fail,
a declared coincidence naming another claim) and returns the problems it found;
:func:`load` raises on any and returns the :class:`Claim` list that :mod:`llmrl.tools.reproduce`
judges.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PATH = Path(__file__).with_name("claims.json")
FORMAT = 1
#: check kind -> the bounds it needs
CHECK_KINDS = {"near": ("target", "tol"), "range": ("lo", "hi"), "above": ("lo",), "below": ("hi",)}
_FIELDS = {"id": str, "lab": str, "statement": str, "published": str, "experiments": list, "check": dict,
           "could_fail": str, "qualitative": bool, "fmt": str, "known": str, "seedless": str,
           "min_seeds": (int, float), "same_values": dict}
_REQUIRED = ("id", "lab", "statement", "published", "experiments", "check", "could_fail")
#: a could-fail reason says what in the run would make the claim fail: at least this many words
COULD_FAIL_WORDS = 8
_CHECK_FIELDS = {"kind": str, "reason": str, "target": (int, float), "tol": (int, float), "lo": (int, float),
                 "hi": (int, float), "about": bool}


@dataclass(frozen=True)
class Check:
    """How a claim is judged on the mean over seeds.

    ``kind``: "near" (|mean - target| <= tol), "range" (lo <= mean <= hi), "above" (mean > lo),
    "below" (mean < hi). ``about``: the published value was stated loosely ("about", "~"): a pass
    is "within about"; otherwise a pass is "holds" (qualitative claims, exact values). ``reason``:
    why this tolerance."""

    kind: str
    reason: str
    target: float | None = None
    tol: float | None = None
    lo: float | None = None
    hi: float | None = None
    about: bool = False

    def passes(self, x: float) -> bool:
        if x is None or not math.isfinite(x):
            return False
        if self.kind == "near":
            return abs(x - self.target) <= self.tol + 1e-12
        if self.kind == "range":
            return self.lo - 1e-12 <= x <= self.hi + 1e-12
        if self.kind == "above":
            return x > self.lo
        if self.kind == "below":
            return x < self.hi
        raise ValueError(f"unknown check kind {self.kind!r}")

    def describe(self) -> str:
        if self.kind == "near":
            return f"±{self.tol:g}"
        if self.kind == "range":
            return f"in [{self.lo:g}, {self.hi:g}]"
        if self.kind == "above":
            return f"> {self.lo:g}"
        return f"< {self.hi:g}"


def near(target: float, tol: float, reason: str, about: bool = True) -> Check:
    return Check("near", reason, target=target, tol=tol, about=about)


def between(lo: float, hi: float, reason: str, about: bool = True) -> Check:
    return Check("range", reason, lo=lo, hi=hi, about=about)


def above(lo: float, reason: str) -> Check:
    return Check("above", reason, lo=lo)


def below(hi: float, reason: str, about: bool = False) -> Check:
    return Check("below", reason, hi=hi, about=about)


@dataclass(frozen=True)
class Claim:
    """One published result. ``measure(results) -> float`` gets {experiment: result} of one seed
    (for every experiment in ``experiments``) and returns our number; the check is applied to the
    mean over seeds, or, with ``min_seeds`` (a statement about one published run, such as "the hack
    completes"), to each seed: at least that share of the seeds must pass. ``seedless``: why the
    seed cannot change the value (greedy decoding, an exact computation): it is judged and reported
    as one value, not as "n of n seeds". ``fmt`` formats values; ``known``: why ours differs, when
    we know (shown only when it does). ``could_fail``: what the run would have to do for the claim
    to fail (every claim has one: a claim no run could miss is a test, not a claim).
    ``same_values``: (other claim id, why) where this claim's per-seed values may equal another's
    (e.g. both at a floor of 0) although they measure different things; any other coincidence is
    reported by :func:`llmrl.tools.reproduce.coincidences`."""

    id: str
    lab: str
    statement: str
    published: str
    experiments: tuple[str, ...]
    measure: Callable[[dict], float]
    check: Check
    qualitative: bool = False
    fmt: str = "{:.3f}"
    known: str = ""
    seedless: str = ""                 # why the seed cannot change the value (greedy decoding, exact maths): one value
    min_seeds: float | None = None     # a statement about one published run: the share of seeds that must pass
    could_fail: str = ""               # what the run would have to do for this claim to fail
    same_values: tuple[str, str] | None = None  # (other claim id, why their values may coincide)


def _text(value: str, reasons: dict) -> str:
    return reasons[value[1:]] if isinstance(value, str) and value.startswith("@") else value


def validate(blob: dict, labs=None, experiments=None, measures=None) -> list[str]:
    """Every problem of a claims file's content (empty: none). ``labs``, ``experiments``, ``measures``:
    the known lab names, experiment names and {id: measure}, checked when given."""
    errors = []
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        return [f"not a claims file of format {FORMAT}"]
    reasons = blob.get("reasons", {})
    if not isinstance(reasons, dict) or not all(isinstance(v, str) and v for v in reasons.values()):
        errors.append("reasons must map names to non-empty texts")
        reasons = {}
    claims = blob.get("claims")
    if not isinstance(claims, list) or not claims:
        return errors + ["claims must be a non-empty list"]
    seen = set()
    for i, c in enumerate(claims):
        where = f"claim {i} ({c.get('id', '?') if isinstance(c, dict) else '?'})"
        if not isinstance(c, dict):
            errors.append(f"{where}: not an object")
            continue
        errors += [f"{where}: missing {k}" for k in _REQUIRED if k not in c]
        errors += [f"{where}: unknown field {k}" for k in c if k not in _FIELDS]
        errors += [f"{where}: {k} must be {getattr(t, '__name__', 'a number')}" for k, t in _FIELDS.items()
                   if k in c and (not isinstance(c[k], t) or (t is not bool and isinstance(c[k], bool)))]
        cid = c.get("id")
        if cid in seen:
            errors.append(f"{where}: id used twice")
        seen.add(cid)
        if isinstance(c.get("id"), str) and isinstance(c.get("lab"), str) and not c["id"].startswith(c["lab"] + "."):
            errors.append(f"{where}: id must start with its lab ({c['lab']}.)")
        if labs is not None and c.get("lab") not in labs:
            errors.append(f"{where}: unknown lab {c.get('lab')!r}")
        exps = c.get("experiments") if isinstance(c.get("experiments"), list) else []
        if not exps:
            errors.append(f"{where}: names no experiment")
        if experiments is not None:
            errors += [f"{where}: unknown experiment {e!r}" for e in exps if e not in experiments]
        chk = c.get("check") if isinstance(c.get("check"), dict) else {}
        errors += _check_errors(where, chk)
        if "min_seeds" in c and not (isinstance(c["min_seeds"], (int, float)) and 0 < c["min_seeds"] <= 1):
            errors.append(f"{where}: min_seeds must be a share in (0, 1]")
        if "fmt" in c and isinstance(c["fmt"], str):
            try:
                c["fmt"].format(1.0)
            except (ValueError, IndexError, KeyError):
                errors.append(f"{where}: fmt {c['fmt']!r} does not format a number")
        for k in ("reason",):
            v = chk.get(k)
            if isinstance(v, str) and v.startswith("@") and v[1:] not in reasons:
                errors.append(f"{where}: unknown reason {v}")
        for k in ("known", "seedless"):
            v = c.get(k)
            if isinstance(v, str) and v.startswith("@") and v[1:] not in reasons:
                errors.append(f"{where}: unknown reason {v} in {k}")
        errors += _could_fail_errors(where, c.get("could_fail"), chk.get("reason"))
        if "same_values" in c:
            errors += _same_values_errors(where, c["same_values"], cid, claims)
        if measures is not None and cid not in measures:
            errors.append(f"{where}: no measure in claim_measures.py")
    if measures is not None:
        errors += [f"measure {m!r} has no claim in claims.json" for m in measures if m not in seen]
    reasons_of = {}
    for c in claims:
        if isinstance(c, dict) and isinstance(c.get("could_fail"), str) and c["could_fail"].strip():
            reasons_of.setdefault(" ".join(c["could_fail"].lower().split()), []).append(c.get("id", "?"))
    errors += [f"claims {', '.join(map(str, ids))} give the same could-fail reason: write each from what its run does"
               for ids in reasons_of.values() if len(ids) > 1]
    return errors


def _check_errors(where: str, chk: dict) -> list[str]:
    """The problems of one claim's ``check`` object: its kind, the fields that kind needs and allows,
    their types, the reason for the tolerance and the bounds' order."""
    errors = []
    kind = chk.get("kind")
    if kind not in CHECK_KINDS:
        errors.append(f"{where}: check kind {kind!r} is not one of {sorted(CHECK_KINDS)}")
    else:
        errors += [f"{where}: a {kind} check needs {k}" for k in CHECK_KINDS[kind] if k not in chk]
        errors += [f"{where}: a {kind} check has no use for {k}" for k in ("target", "tol", "lo", "hi")
                   if k in chk and k not in CHECK_KINDS[kind]]
    errors += [f"{where}: check field {k} unknown or of the wrong type" for k, v in chk.items()
               if k not in _CHECK_FIELDS or not isinstance(v, _CHECK_FIELDS[k])]
    if not chk.get("reason"):
        errors.append(f"{where}: the check gives no reason for its tolerance")
    if kind == "near" and isinstance(chk.get("tol"), (int, float)) and not chk["tol"] >= 0:
        errors.append(f"{where}: tol must be >= 0")
    if kind == "range" and all(isinstance(chk.get(k), (int, float)) for k in ("lo", "hi")) and not chk["lo"] < chk["hi"]:
        errors.append(f"{where}: lo must be below hi")
    return errors


def _could_fail_errors(where: str, text, tolerance_reason) -> list[str]:
    """What is wrong with a claim's could-fail reason (missing, a named reason, too short, its tolerance's)."""
    if text is None:
        return []  # reported as a missing field
    if not isinstance(text, str) or not text.strip():
        return [f"{where}: could_fail must say what in the run would make the claim fail"]
    if text.startswith("@"):
        return [f"{where}: could_fail must be written for this claim, not a named reason ({text})"]
    if len(text.split()) < COULD_FAIL_WORDS:
        return [f"{where}: could_fail is too short to say what in the run would make the claim fail "
                f"({len(text.split())} words, at least {COULD_FAIL_WORDS})"]
    if isinstance(tolerance_reason, str) and text.strip() == tolerance_reason.strip():
        return [f"{where}: could_fail repeats the tolerance's reason; say what in the run would make it fail"]
    return []


def _same_values_errors(where: str, same, cid, claims) -> list[str]:
    """What is wrong with a declared coincidence: {"as": another claim's id, "why": a text}."""
    if not isinstance(same, dict) or set(same) != {"as", "why"}:
        return [f"{where}: same_values must be {{\"as\": a claim id, \"why\": a text}}"]
    errors = []
    ids = {c.get("id") for c in claims if isinstance(c, dict)}
    if same["as"] == cid:
        errors.append(f"{where}: same_values names the claim itself")
    elif same["as"] not in ids:
        errors.append(f"{where}: same_values names no claim {same['as']!r}")
    if not isinstance(same["why"], str) or not same["why"].strip():
        errors.append(f"{where}: same_values must say why the two values may coincide")
    return errors


def load(measures: dict[str, Callable[[dict], float]], path: Path = PATH, labs=None, experiments=None) -> list[Claim]:
    """The claims of ``path`` joined with their measures; raises ValueError naming every problem."""
    try:
        blob = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: the reproduction claims are read from the repository's "
                                "lib/llmrl/tools/ (an editable install, make venv); the student wheel does not "
                                "ship them") from None
    errors = validate(blob, labs, experiments, measures)
    if errors:
        raise ValueError(f"{path}: " + "; ".join(errors))
    reasons = blob["reasons"]
    out = []
    for c in blob["claims"]:
        chk = dict(c["check"], reason=_text(c["check"]["reason"], reasons))
        extra = {k: _text(c[k], reasons) for k in ("qualitative", "fmt", "known", "seedless", "min_seeds", "could_fail")
                 if k in c}
        if "same_values" in c:
            extra["same_values"] = (c["same_values"]["as"], c["same_values"]["why"])
        out.append(Claim(id=c["id"], lab=c["lab"], statement=c["statement"], published=c["published"],
                         experiments=tuple(c["experiments"]), measure=measures[c["id"]], check=Check(**chk), **extra))
    return out
