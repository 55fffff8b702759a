"""`make feedback`: feedback pages from the gradebook, held back while a notebook awaits manual grading.
"""

from __future__ import annotations
from pathlib import Path
from autograder.course.layout import Lab, PipelineError, ROOT, assignments, rel
from autograder.course.nbgrader_app import load_config

# ----------------------------------------------------------------------------- feedback

def feedback(labs: list[Lab], force: bool = False, root: Path = ROOT) -> dict:
    """Feedback HTML from the gradebook as it is now (manual grades from the formgrader included)
    into feedback/<student>/<assignment>/: a notebook with something no person has graded yet (a
    written answer, a notebook held for review) is held back, and an older copy of it taken out,
    unless `force`; its page then says "awaiting grading" for those cells. Returns
    {"released": [...], "held": [...], "problems": [...]} (student/assignment/notebook)."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.export import feedback_pages as fb
    from autograder.sandbox import safe_files as files

    done: dict[str, list[str]] = {"released": [], "held": [], "problems": []}
    db = root / "gradebook.db"
    if not db.exists():
        raise PipelineError(f"{rel(db, root)} missing: grade the submissions first (make autograde)")
    scratch = files.scratch_dir("feedback")
    try:
        cfg = load_config(root, settings_from=root)
        cfg.CourseDirectory.feedback_directory = str(scratch)  # absolute: feedback/ only gets what is released
        cfg.Application.log_level = "ERROR"
        api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
        for a in assignments(labs):
            folders = sorted(p for p in (root / "autograded").glob(f"*/{a}") if p.is_dir() and not p.is_symlink())
            for folder in folders:
                student = folder.parent.name
                with Gradebook(f"sqlite:///{db}") as gb:
                    try:
                        gb.find_submission(a, student)
                    except MissingEntry:
                        done["problems"].append(f"{student}/{a}: in autograded/ but not in the gradebook; skipped")
                        continue
                r = api.generate_feedback(a, student, force=True)  # (it writes comment rows: no session open)
                if not r.get("success"):
                    detail = (r.get("error") or r.get("log") or "").strip().splitlines()
                    done["problems"].append(f"{student}/{a}: nbgrader generate_feedback failed: "
                                            f"{detail[-1] if detail else 'no detail'}")
                    continue
                with Gradebook(f"sqlite:///{db}") as gb:
                    out = scratch / student / a
                    target = root / "feedback" / student / a
                    for page in sorted(out.glob("*")):
                        if not files.is_regular(page):
                            continue
                        who = f"{student}/{a}/{page.stem}"
                        pending = fb.pending_in_gradebook(gb, a, student, page.stem) if page.suffix == ".html" else []
                        if pending and not force:
                            done["held"].append(f"{who}: {len(pending)} cell(s) awaiting grading ({', '.join(pending)})")
                            if files.is_regular(target / page.name):
                                (target / page.name).unlink()
                            continue
                        files.copy_regular(page, target / page.name)
                        if page.suffix == ".html":
                            done["released"].append(who + (f" (forced: {len(pending)} cell(s) awaiting grading)"
                                                            if pending else ""))
    finally:
        files.rmtree(scratch)
    for kind in ("released", "held", "problems"):
        for line in done[kind]:
            print(f"{kind:<9} {line}")
    print(f"feedback/: {len(done['released'])} notebook(s) released, {len(done['held'])} held back"
          + (" (grade them in the formgrader, then run this again; `make feedback FORCE=1` releases them as they "
             "are, saying \"awaiting grading\")" if done["held"] else ""))
    return done


