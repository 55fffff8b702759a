"""What the student reads of a grading on submit: the summary in status.json (per notebook, per task and
concern; the points only in the "score" setting) and status.html. Everything from the submission is
escaped."""

from __future__ import annotations

import datetime
import html

HELD = "held for review"


def utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary_of(result: dict, mode: str) -> dict:
    """The status's notebooks (per task and concern) from course_tool.py grade-one's result."""
    from autograder.export.feedback_pages import test_label

    report = result.get("report") or {}
    nbs = []
    for nb in report.get("notebooks", []):
        tests = []
        for c in nb.get("cells", []):
            if c.get("needs_manual_grade") and not nb.get("needs_manual_review"):
                tests.append({"grade_id": c["grade_id"], "label": "Written answer: " + c["grade_id"].replace("_", " "),
                              "verdict": "awaiting grading", "points": None, "max_points": c.get("max_points")})
                continue
            passed = c.get("points") == c.get("max_points")
            tests.append({"grade_id": c["grade_id"], "label": test_label(c["grade_id"]),
                          "verdict": "passed" if passed else "failed", "points": c.get("points"),
                          "max_points": c.get("max_points"), "message": (c.get("error") or "")[:500]})
        nbs.append({"notebook": nb.get("notebook"), "status": nb.get("status"), "points": nb.get("points"),
                    "max_points": nb.get("max_points"), "late_penalty": nb.get("late_penalty") or 0,
                    "reason": nb.get("reason") or "", "held": bool(nb.get("needs_manual_review")), "tests": tests})
    out = {"notebooks": nbs, "notes": list(result.get("notes") or []), "timestamp": report.get("timestamp"),
           "late": bool(result.get("late")) or any(n["late_penalty"] for n in nbs)}
    if mode != "score":  # the points stay with the instructor until they release them
        for n in out["notebooks"]:
            n["points"] = n["max_points"] = n["late_penalty"] = None
            for t in n["tests"]:
                t["points"] = t["max_points"] = None
    return out


def status_page(status: dict) -> str:
    """status.html: what the student reads. Everything from the submission is escaped."""
    e = html.escape
    a = e(status["assignment"])
    state = status["state"]
    head = {"queued": "queued for grading", "running": "being graded", "graded": "graded",
            "held": HELD, "refused": "not graded", "error": "not graded on submit"}.get(state, e(state))
    lines = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
             "<meta http-equiv='refresh' content='20'>" if state in ("queued", "running") else "",
             f"<title>{a}: feedback on submit</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}td,th{padding:.2em .8em;"
             "text-align:left}.passed{color:#3c763d}.failed{color:#c9302c}.msg{color:#555;font-size:90%}</style>",
             "</head><body>", f"<h2>{a}: your submission of {e(status.get('submitted_at') or '?')} is {head}</h2>"]
    if status.get("message"):
        lines.append(f"<p>{e(status['message'])}</p>")
    if state == "graded":
        s = status["summary"]
        if s.get("late"):
            lines.append("<p>It was submitted after the due date: it is marked late, as the instructor's grading "
                         "will mark it.</p>")
        if status["mode"] != "score":
            lines.append("<p>Your instructor shows which tests pass now and the points when they release the "
                         "grades.</p>")
        for note in s.get("notes", []):
            lines.append(f"<p class='msg'>{e(note)}</p>")
        for nb in s["notebooks"]:
            name = e(str(nb["notebook"]))
            waiting = sum(t["max_points"] or 0 for t in nb["tests"] if t["verdict"] == "awaiting grading")
            score = "" if nb["points"] is None else f": {nb['points']:g} of {nb['max_points'] - waiting:g} points" + (
                f" so far ({waiting:g} more for written answers a person grades)" if waiting else "")
            lines.append(f"<h3>{name}{score}</h3>")
            if nb["status"] != "graded":
                lines.append(f"<p>{e(nb['status'])}: {e(nb['reason'])}</p>")
                continue
            if status.get("pages") and f"{nb['notebook']}.html" in status["pages"]:
                lines.append(f"<p><a href='{e(nb['notebook'])}.html'>The feedback page of {name}</a> (your cells, "
                             f"each test's result and its message).</p>")
            lines.append("<table><tr><th>task and concern</th><th>result</th>"
                         + ("<th>points</th>" if status["mode"] == "score" else "") + "</tr>")
            for t in nb["tests"]:
                pts = "" if status["mode"] != "score" else (
                    "<td></td>" if t["points"] is None else f"<td>{t['points']:g} / {t['max_points']:g}</td>")
                msg = f"<div class='msg'>{e(t['message'])}</div>" if t.get("message") and t["verdict"] == "failed" else ""
                lines.append(f"<tr><td>{e(t['label'])}{msg}</td><td class='{e(t['verdict'])}'>{e(t['verdict'])}</td>"
                             f"{pts}</tr>")
            lines.append("</table>")
    lines.append(f"<p class='msg'>Updated {e(status['updated'])}. Grading on submit is feedback for you; your "
                 f"grade is what your instructor's grading gives.</p></body></html>")
    return "\n".join(l for l in lines if l)
