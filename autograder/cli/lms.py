"""The course and a learning-management system (Canvas, Moodle): the class list in, the LMS's
submission downloads in, the grades out (docs/lms.md walks through it).

    autograder/bin/lms roster FILE.csv [--course DIR] [--id-column NAME]
        the class list, as Canvas (Grades > Export) or Moodle (Grades > Export > Plain text file, or
        Participants > Download table data) writes it -> the gradebook's students and DIR/roster.json
    autograder/bin/lms collect ASSIGNMENT FILE.zip... [--course DIR]
        the "Download submissions" zip of Canvas or Moodle -> nbgrader zip_collect with this module's
        plugins -> DIR/submitted/<student>/<assignment>/; says which file went to whom and what could
        not be matched (then `make autograde` as usual)
    autograder/bin/lms export canvas|moodle [--course DIR] [--out FILE] [--totals-only]
        the gradebook as the LMS's gradebook import reads it (also `nbgrader export --exporter
        autograder.export.lms_grades.CanvasGrades` / `autograder.export.lms_grades.MoodleGrades` in the course folder)
    autograder/bin/lms sample canvas|moodle [ASSIGNMENT...] [--out DIR]
        a class list and a submissions zip of the sample students, as that LMS writes them (to try
        the steps above before the class hands anything in)

Nothing the LMS files hold is trusted: names in a download are chosen by students (a file name)
or by the LMS from their names, so a file is only given to a student the class list names, by the
LMS's own user number where the download carries one (Canvas) and by the full name otherwise
(Moodle, which numbers participants per assignment); a name that fits nobody, or two people, is
reported and not collected. Archives are read entry by entry: only notebooks are extracted, never
through a link or outside the extraction folder, with size caps; an archive inside the download
is not opened. Every CSV cell goes through files.write_csv (no cell can be a spreadsheet formula).

"""

from __future__ import annotations
import argparse
import sys
from pathlib import Path
from autograder.collect.lms_downloads import collect
from autograder.course.layout import PipelineError, ROOT, rel
from autograder.course.roster import ROSTER, import_roster, load_roster
from autograder.authoring.lms_samples import write_sample
from autograder.export.lms_grades import export

# ----------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/bin/lms", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("roster", help="import the class list (CSV from Canvas or Moodle)")
    r.add_argument("file", type=Path)
    r.add_argument("--id-column", help="the column whose value becomes the student id "
                                       "(default Canvas: SIS Login ID, SIS User ID, ID; Moodle: Username, ID number, "
                                       "Email address; the first one filled in)")
    c = sub.add_parser("collect", help="hand in the LMS's submissions download of one assignment")
    c.add_argument("assignment")
    c.add_argument("files", nargs="+", type=Path)
    e = sub.add_parser("export", help="the grades as the LMS's gradebook import reads them")
    e.add_argument("lms", choices=["canvas", "moodle"])
    e.add_argument("assignments", nargs="*", help="only these assignments (default: all in the gradebook)")
    e.add_argument("--out", type=Path, help="the CSV written (default: grades-<lms>.csv in the course folder)")
    e.add_argument("--totals-only", action="store_true", help="one column per assignment, no automatic/written parts")
    s = sub.add_parser("sample", help="a class list and submission downloads of the sample students")
    s.add_argument("lms", choices=["canvas", "moodle"])
    s.add_argument("assignments", nargs="*")
    s.add_argument("--out", type=Path, default=ROOT / "build" / "lms-sample")
    for p in (r, c, e):
        p.add_argument("--course", type=Path, default=ROOT, help="the course folder (default: this repository)")
    args = parser.parse_args(argv)
    try:
        if args.command == "roster":
            res = import_roster(args.file, args.course.resolve(), args.id_column)
            print(f"class list from {res['lms'].capitalize()}: {res['students']} students "
                  f"({len(res['new'])} new in the gradebook); ids as the grader uses them: "
                  + ", ".join(p.student_id for p in load_roster(args.course.resolve()).people[:8])
                  + (" ..." if res["students"] > 8 else ""))
            for line in res["skipped"]:
                print(f"  left out: {line}")
            if res["not_on_list"]:
                print(f"  in the gradebook but not on this list (kept, with their grades): {', '.join(res['not_on_list'])}")
            print(f"wrote {rel(args.course.resolve() / ROSTER, ROOT)}")
        elif args.command == "collect":
            res = collect(args.assignment, args.files, args.course.resolve())
            for sid, names in res["collected"].items():
                print(f"collected {sid}: {', '.join(names)}" + ("  (late, says the LMS)" if sid in res["late"] else ""))
            for f, why in res["not_collected"]:
                print(f"NOT collected {f}: {why}")
            for line in res["skipped"]:
                print(f"skipped   {line}")
            if res["missing"]:
                print(f"no notebook in the download (missing): {', '.join(res['missing'])}")
            print(f"{len(res['collected'])} student(s) into submitted/*/{args.assignment}/; next: "
                  f"make autograde A={args.assignment}"
                  + ("" if args.course.resolve() == ROOT else
                     f" (for this course folder: python -m autograder autograde {args.assignment} --course {args.course})"))
            if res["late"]:
                print("The LMS marked some submissions late; the grader counts lateness only from a "
                      "timestamp.txt (docs/instructors.md, \"Due dates and late submissions\").")
        elif args.command == "export":
            target, report = export(args.course.resolve(), args.lms, args.out, args.totals_only, args.assignments or None)
            for line in report:
                print(f"  {line}")
            print(f"wrote {target}: import it in {args.lms.capitalize()} "
                  + ("(Grades > Import; match students by ID)" if args.lms == "canvas" else
                     "(Grades > Import > CSV file; map from Email address to Email address)"))
        elif args.command == "sample":
            for p in write_sample(args.lms, args.out, args.assignments):
                print(f"wrote {p}")
    except (PipelineError, OSError) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
