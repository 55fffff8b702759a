"""grades.csv and the score table from the gradebook (automatic and manual points apart; pending and
missing marked), and nbgrader's exporter plugin for it.
"""

from __future__ import annotations
import functools
from pathlib import Path
from autograder.course.layout import Lab, ROOT, assignments
from autograder.course.nbgrader_app import load_config

# ----------------------------------------------------------------------------- grade tables
#
# Points come apart in two kinds: *automatic* (test cells, scored by the grader) and *manual*
# (written answers: cells that are both graded and a solution, scored by a person in the
# formgrader). A manual cell is pending until a person has scored it; a notebook the grader held
# for review (batch.py: an answer outside the wire format, the answer-key check) is pending too.
# A student without a submission, or a notebook that was not handed in, is "missing", never 0.

GRADE_COLUMNS = ["assignment", "student_id", "last_name", "first_name", "email", "timestamp", "automatic",
                 "automatic_max", "manual", "manual_max", "manual_pending", "late_penalty", "total", "max_score",
                 "status", "notes"]


def manual_cells(gb, assignment) -> set[tuple[str, str]]:
    """(notebook, grade_id) of the manually graded cells of an assignment in the gradebook."""
    out = set()
    for nb in assignment.notebooks:
        solutions = {c.name for c in nb.solution_cells}
        out |= {(nb.name, c.name) for c in nb.grade_cells if c.name in solutions}
    return out


def notebook_state(nb, manual: set[tuple[str, str]]) -> dict:
    """Points of one submitted notebook of the gradebook, automatic and manual apart."""
    grades = list(nb.grades)
    s = {"notebook": nb.name, "automatic": 0.0, "automatic_max": 0.0, "manual": 0.0, "manual_max": 0.0,
         "manual_pending": 0.0, "pending_cells": [], "review": False, "late_penalty": 0.0,
         # never scored at all: the batch records a notebook that was not handed in that way
         "missing": bool(grades) and all(g.auto_score is None and g.manual_score is None
                                         and not g.needs_manual_grade for g in grades)}
    if s["missing"]:
        for g in grades:
            s["manual_max" if (nb.name, g.name) in manual else "automatic_max"] += g.max_score
        return s
    for g in grades:
        extra = g.extra_credit or 0.0
        if (nb.name, g.name) in manual:
            s["manual_max"] += g.max_score
            if g.needs_manual_grade:  # the formgrader clears it; an unchanged answer never has it (0 points)
                s["manual_pending"] += g.max_score
                s["pending_cells"].append(g.name)
            else:
                s["manual"] += (g.manual_score if g.manual_score is not None else g.auto_score or 0.0) + extra
        else:
            s["automatic_max"] += g.max_score
            if g.needs_manual_grade:  # held for review: zero until a person confirms or overrides it
                s["review"] = True
                s["pending_cells"].append(g.name)
            elif g.manual_score is not None:  # a reviewer's override
                s["automatic"] += g.manual_score + extra
            else:
                s["automatic"] += (g.auto_score or 0.0) + extra
    s["late_penalty"] = float(nb.late_submission_penalty or 0.0)
    return s


def late_policy(root: Path):
    """The course's late policy on final scores: penalty(student, score, seconds_late) -> points off.

    nbgrader applies the policy (AssignLatePenalties, with the course's LateSubmissionPlugin and its
    settings, the course folder's own nbgrader_config.py included) when a notebook is autograded, to
    its automatic points; a written answer graded later in the formgrader is not covered, so a late
    notebook under "zero" would end with its manual points. The grade tables apply the same plugin to
    each notebook's final score instead, bounded as nbgrader bounds it (0 to the score)."""
    from nbgrader.preprocessors import AssignLatePenalties

    cfg = load_config(root, settings_from=root)
    assign = AssignLatePenalties(config=cfg)
    assign.init_plugin()
    plugin = assign.plugin_inst

    def penalty(student: str, score: float, seconds_late: float) -> float:
        if seconds_late <= 0:
            return 0.0
        p = plugin.late_submission_penalty(student, score, seconds_late)
        return 0.0 if p is None else min(max(float(p), 0.0), score)
    return penalty


def grade_rows(root: Path = ROOT, selected: list[str] | tuple[str, ...] = (),
               failed: dict[tuple[str, str], str] | None = None) -> list[dict]:
    """One row per assignment and student of the gradebook (GRADE_COLUMNS, plus "notebooks").

    `failed` maps (assignment, student) to why this run could not grade them: their row says so
    instead of showing what an older run left in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    db = root / "gradebook.db"
    if not db.exists():
        return []
    failed = failed or {}
    policy = functools.cache(lambda: late_policy(root))  # the course's late policy, read once a late submission needs it
    rows = []
    with Gradebook(f"sqlite:///{db}") as gb:
        students = sorted(gb.students, key=lambda x: x.id)
        for a in sorted(gb.assignments, key=lambda x: x.name):
            if selected and a.name not in selected:
                continue
            manual = manual_cells(gb, a)
            for st in students:
                row = {k: "" for k in GRADE_COLUMNS}
                row.update(assignment=a.name, student_id=st.id, last_name=st.last_name or "",
                           first_name=st.first_name or "", email=st.email or "", notebooks=[])
                try:
                    sub = gb.find_submission(a.name, st.id)
                except MissingEntry:
                    sub = None
                if (a.name, st.id) in failed:
                    row.update(status="failed", notes=f"not graded: {failed[(a.name, st.id)]}")
                elif sub is None:
                    row.update(status="missing", notes="no submission")
                else:
                    _fill_submitted_row(row, sub, manual, root, a.name, st.id, policy)
                rows.append(row)
        known = {(r["assignment"], r["student_id"]) for r in rows}
        for (a, student), why in sorted(failed.items()):  # failed before the gradebook ever saw them
            if (a, student) not in known and (not selected or a in selected):
                row = {k: "" for k in GRADE_COLUMNS}
                row.update(assignment=a, student_id=student, status="failed", notes=f"not graded: {why}",
                           notebooks=[])
                rows.append(row)
    return rows


def _fill_submitted_row(row: dict, sub, manual, root: Path, assignment: str, student: str, policy) -> None:
    """A row from the student's submission in the gradebook: each notebook's state (with the late
    penalty of `policy()`, the course's late policy), the totals, the status and its notes."""
    from autograder.collect import exchange as course_collect

    row["timestamp"] = str(sub.timestamp or "")
    late = float(sub.total_seconds_late or 0.0)
    states = [notebook_state(nb, manual) for nb in sorted(sub.notebooks, key=lambda n: n.name)]
    if late > 0:  # the policy on each notebook's final score, manual points included
        penalty = policy()
        for x in states:
            if not x["missing"]:
                x["late_penalty"] = penalty(student, x["automatic"] + x["manual"], late)
    row["notebooks"] = states
    got = [x for x in states if not x["missing"]]
    notes = [f"{x['notebook']}.ipynb missing" for x in states if x["missing"]]
    if not got:
        row.update(status="missing", notes="; ".join(notes) or "no notebook")
        return
    tot = {k: sum(x[k] for x in states) for k in ("automatic_max", "manual_max")}
    tot.update({k: sum(x[k] for x in got) for k in ("automatic", "manual", "manual_pending", "late_penalty")})
    review = any(x["review"] for x in got)
    pending = [c for x in got for c in x["pending_cells"]]
    row.update({k: f"{v:g}" for k, v in tot.items()})
    row["max_score"] = f"{tot['automatic_max'] + tot['manual_max']:g}"
    stamped = course_collect.collection_note(root, assignment, student)
    if stamped:  # the collection graded the inbound files' time, not the student's
        notes.append(stamped)
    if late > 0:
        notes.append(f"late by {_duration(late)}" + (f", penalty -{tot['late_penalty']:g}"
                                                      if tot["late_penalty"] else ""))
    if review:
        status = "review"
        notes.append("automatic points held for review (batch_grades.csv says why): "
                     + ", ".join(c for x in got if x["review"] for c in x["pending_cells"]))
    elif pending:
        status = "awaiting grading"
        notes.append(f"{len(pending)} written answer(s) to grade in the formgrader: " + ", ".join(pending))
    else:
        status = "graded"
        total = tot["automatic"] + tot["manual"] - tot["late_penalty"]
        row["total"] = f"{max(total, 0.0):g}"
    row.update(status=status, notes="; ".join(notes))


def _duration(seconds: float) -> str:
    """1 d 2 h 3 min (whole minutes; under a minute in seconds)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    m = int(seconds // 60)
    parts = [(m // 1440, "d"), (m // 60 % 24, "h"), (m % 60, "min")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 min"


def write_grades_csv(root: Path = ROOT, failed: dict[tuple[str, str], str] | None = None,
                     path: Path | None = None) -> Path:
    """grades.csv from the gradebook (atomically): automatic and manual points apart, status.
    No cell can be a spreadsheet formula (files.spreadsheet_safe)."""
    from autograder.sandbox import safe_files as files

    target = path or root / "grades.csv"
    files.write_csv(target, GRADE_COLUMNS, grade_rows(root, failed=failed), extrasaction="ignore")
    return target


from nbgrader.plugins import ExportPlugin  # noqa: E402  (nbgrader is imported above, by _speedups)


class GradesCsv(ExportPlugin):
    """`nbgrader export` (autograder/nbgrader_config.py: ExportApp.plugin_class): the course's grades.csv."""

    def export(self, gradebook) -> None:
        db = Path(gradebook.engine.url.database)
        write_grades_csv(db.parent, path=Path(self.to) if self.to else None)


def _cell(points: str, of: str) -> str:
    return f"{points} / {of}"


def score_table(labs: list[Lab], root: Path = ROOT, failed: dict | None = None, no_submission: bool = True) -> str:
    """The gradebook as a text table: automatic and manual points apart, pending and missing marked.

    no_submission=False leaves out the students who handed in nothing for an assignment (the demo:
    each sample student is written for one assignment)."""
    header = ("assignment", "student", "automatic", "manual (written)", "total", "status")
    rows = [header]
    for r in grade_rows(root, assignments(labs), failed):
        if not no_submission and r["status"] == "missing" and r["notes"] == "no submission":
            continue
        if r["status"] in ("missing", "failed"):
            rows.append((r["assignment"], r["student_id"], r["status"], "-", "-", r["notes"] and
                         f"{r['status']}: {r['notes']}" or r["status"]))
            continue
        auto = _cell(r["automatic"], r["automatic_max"]) if r["status"] != "review" else f"held / {r['automatic_max']}"
        if float(r["manual_max"] or 0) == 0:
            manual = "-"
        elif float(r["manual_pending"] or 0) > 0:
            done = float(r["manual_max"]) - float(r["manual_pending"])
            manual = (f"pending / {r['manual_max']}" if done == 0 else
                      f"{r['manual']} + {r['manual_pending']} pending / {r['manual_max']}")
        else:
            manual = _cell(r["manual"], r["manual_max"])
        total = _cell(r["total"], r["max_score"]) if r["total"] != "" else "pending"
        status = r["status"] + (f": {r['notes']}" if r["notes"] else "")
        rows.append((r["assignment"], r["student_id"], auto, manual, total, status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows)


