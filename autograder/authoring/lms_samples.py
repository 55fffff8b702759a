"""Files an LMS would give the course, made from the sample students: a class list and a submissions zip
as Canvas or Moodle writes them (`autograder/bin/lms sample`, to try the LMS steps before the class hands in)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from autograder.authoring.samples import sample_submissions
from autograder.course.layout import ROOT, discover
from autograder.sandbox import safe_files as files

# The sample students of `make demo` (autograder/samples) as a class would have them in an LMS.
SAMPLE_PEOPLE = [  # student id (= the sample's name), first, last, Canvas user number, SIS user id
    ("reference", "Ada", "Lovelace", "40101", "2026001"),
    ("untouched", "Blaise", "Pascal", "40102", "2026002"),
    ("k3_flipped", "Carl", "Gauss", "40103", "2026003"),
    ("off_by_one", "Dorothy", "Vaughan", "40104", "2026004"),
    ("prob_space", "Emmy", "Noether", "40105", "2026005"),
    ("times_mask", "Fan", "Chung", "40106", "2026006"),
    ("lab19_first_draft", "Grace", "Hopper", "40107", "2026007"),
    ("absent", "Hedy", "Lamarr", "40108", "2026008"),  # hands in nothing
]


def write_sample(lms: str, out: Path, assignments: list[str] | None = None, root: Path = ROOT) -> list[Path]:
    """A class list and, per assignment, a "Download submissions" zip of the sample students, named
    and laid out as `lms` writes them; a student who dropped the course (not on the list) and a PDF
    are in each zip too, as in a real download."""
    import nbformat

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labs = discover(assignments or ())
    written = []
    roster_path = out / f"{lms}-class-list.csv"
    if lms == "canvas":
        header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + \
                 [f"{a} ({9100 + i})" for i, a in enumerate(assignments(labs))] + ["Current Points", "Final Points"]
        rows = [{"Student": "    Points Possible", **{h: "" for h in header[5:]}}]
        rows.append({"Student": "Student, Test", "ID": "49999", "SIS User ID": "", "SIS Login ID": "",
                     "Section": "RL for LMs 2026"})
        for sid, first, last, uid, sis in SAMPLE_PEOPLE:
            rows.append({"Student": f"{last}, {first}", "ID": uid, "SIS User ID": sis, "SIS Login ID": sid,
                         "Section": "RL for LMs 2026"})
    else:
        header = ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
                  "Last downloaded from this course"]
        rows = [{"First name": first, "Last name": last, "ID number": sis, "Institution": "", "Department": "",
                 "Email address": f"{sid}@uni.example", "Last downloaded from this course": "1796000000"}
                for sid, first, last, uid, sis in SAMPLE_PEOPLE]
    files.write_csv(roster_path, header, rows)
    written.append(roster_path)
    people = {sid: (n, first, last, uid) for n, (sid, first, last, uid, _) in enumerate(SAMPLE_PEOPLE, start=1)}
    for a in assignments(labs):
        target = out / f"{lms}-{a}-submissions.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
            for lab in (lab for lab in labs if lab.assignment == a):
                for sid, nb in sample_submissions(lab).items():
                    if sid not in people:
                        continue
                    n, first, last, uid = people[sid]  # one submission (and number) per student
                    data = nbformat.writes(nb).encode()
                    if lms == "canvas":
                        late = "_LATE" if sid == "untouched" else ""
                        z.writestr(f"{(last + first).lower()}{late}_{uid}_{700000 + n}_{lab.name}.ipynb", data)
                    else:
                        z.writestr(f"{first} {last}_{880000 + n}_assignsubmission_file_/{lab.name}.ipynb", data)
                dropped = nbformat.writes(sample_submissions(lab)["reference"])
                if lms == "canvas":  # a student who dropped the course, and a PDF beside a notebook
                    z.writestr(f"turingalan_40199_700099_{lab.name}.ipynb", dropped)
                else:
                    z.writestr(f"Alan Turing_889999_assignsubmission_file_/{lab.name}.ipynb", dropped)
            if lms == "canvas":
                z.writestr("lovelaceada_40101_700001_notes.pdf", b"%PDF-1.4\n% a PDF, not a notebook\n")
            else:
                z.writestr("Ada Lovelace_880001_assignsubmission_file_/notes.pdf", b"%PDF-1.4\n")
        written.append(target)
    return written


