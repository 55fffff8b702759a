"""Submission downloads of Canvas and Moodle in: who handed in which file (by the class list), the
zip read entry by entry with caps, nbgrader zip_collect's plugins.
"""

from __future__ import annotations
import re
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from nbgrader.plugins.zipcollect import ExtractorPlugin, FileNameCollectorPlugin
from autograder.course.layout import ROOT
from autograder.course.nbgrader_app import load_config
from autograder.course.roster import LmsError, MAX_ENTRIES, MAX_EXTRACTED, MAX_NOTEBOOK, Roster, load_roster
from autograder.sandbox import safe_files as files

# ----------------------------------------------------------------------------- downloads in

def _norm_name(name: str) -> str:
    """'José  O'Neil' -> 'joseoneil': how a name is compared with the file names an LMS writes."""
    s = unicodedata.normalize("NFKD", name)
    s = "".join(c for c in s if not unicodedata.combining(c))
    return re.sub(r"[\W_]+", "", s.lower())


# Canvas: <lastfirst>[_LATE]_<user number>_<submission number>_<the student's file name>, the file
# name with -1, -2... before the extension for a resubmission.
CANVAS_FILE = re.compile(r"^(?P<name>[^_/]+?)(?:_(?P<late>late))?_(?P<user>\d+)_(?P<sub>\d+)_(?P<file>.+)$", re.I)
# Moodle: <Full Name>_<participant number>_assignsubmission_file_ then either a folder holding the
# student's files (Moodle 3.1 and later, "Download submissions in folders") or the file name.
MOODLE_PART = re.compile(r"^(?P<name>.+)_(?P<part>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)$")


@dataclass
class Match:
    file: str                      # path inside the extracted download
    student_id: str | None
    why: str                       # who it was given to and how, or why to nobody
    late: bool = False


def identify(rel_path: str, roster: Roster) -> Match:
    """Who handed in this file of an LMS download, judged from its path and the class list."""
    parts = Path(rel_path).parts
    for i, part in enumerate(parts):  # the LMS's own name may sit below the folder of the zip
        m = CANVAS_FILE.match(part) if i == len(parts) - 1 else None
        if m:
            people = [p for p in roster.people if p.lms_user_id == m.group("user")]
            late = bool(m.group("late"))
            if len(people) == 1:
                return Match(rel_path, people[0].student_id, f"Canvas user {m.group('user')}", late)
            return Match(rel_path, None, f"Canvas user {m.group('user')} ({m.group('name')}) is not on the class "
                                         f"list (a student who joined later? import the list again)", late)
        m = MOODLE_PART.match(part)
        if m:
            name = m.group("name")
            if m.group("plugin") != "file":
                return Match(rel_path, None, f"Moodle {m.group('plugin')} submission (only uploaded files are "
                                             f"collected)")
            if name.lower().startswith("participant") and _norm_name(name) == "participant":
                return Match(rel_path, None, "Moodle's blind marking hides whose file this is: reveal student "
                                             "identities in the assignment's settings and download again")
            key = _norm_name(name)
            people = [p for p in roster.people if key in (_norm_name(p.first_name + p.last_name),
                                                          _norm_name(p.last_name + p.first_name))]
            if len(people) == 1:
                return Match(rel_path, people[0].student_id, f"Moodle participant {name!r}")
            if len(people) > 1:
                return Match(rel_path, None, f"{name!r} is the name of {len(people)} students on the class list "
                                             f"({', '.join(p.student_id for p in people)}): copy it by hand to "
                                             f"submitted/<student>/<assignment>/")
            return Match(rel_path, None, f"{name!r} is not on the class list")
    return Match(rel_path, None, "not named the way Canvas or Moodle name a download (<name>_<number>_... )")


def _safe_file_name(name: str) -> str:
    """The student's own file name, as a plain name in one folder: no path, no odd characters."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    stem = re.sub(r"[^A-Za-z0-9 ()._+-]+", "_", stem if dot else base).strip(" .") or "notebook"
    return f"{stem[:120]}.ipynb"


class LmsExtractor(ExtractorPlugin):
    """zip_collect's extractor for LMS downloads: only notebooks come out of an archive, each to a
    path inside the extraction folder (never through a link, never "..", never absolute), at most
    MAX_NOTEBOOK bytes each and MAX_EXTRACTED in all; archives inside the download stay closed.
    Loose notebooks in the archive folder are copied. What was left out is in `self.report`."""

    def extract(self, archive_path: str, extracted_path: str) -> None:
        self.report: list[str] = []
        archive, out = Path(archive_path), Path(extracted_path)
        total = 0
        for src in sorted(archive.iterdir()):
            if not files.is_regular(src):
                self.report.append(f"{src.name}: not a regular file, skipped")
                continue
            if src.suffix.lower() == ".ipynb":
                files.copy_regular(src, out / src.name, MAX_NOTEBOOK)
                continue
            if src.suffix.lower() != ".zip":
                self.report.append(f"{src.name}: neither a zip nor a notebook, skipped")
                continue
            try:
                total = self._unzip(src, out / re.sub(r"[^A-Za-z0-9._-]+", "_", src.stem), total)
            except zipfile.BadZipFile as e:
                raise LmsError(f"{src.name} is not a zip file that can be read ({e}): download it again") from None

    def _unzip(self, src: Path, dest: Path, total: int) -> int:
        others: dict[str, int] = {}
        with zipfile.ZipFile(src) as z:
            entries = z.infolist()
            if len(entries) > MAX_ENTRIES:
                raise LmsError(f"{src.name} holds {len(entries)} entries (at most {MAX_ENTRIES} are read)")
            for info in entries:
                name = info.filename
                if info.is_dir():
                    continue
                kind = (info.external_attr >> 16) & 0o170000
                parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
                if kind == stat.S_IFLNK:
                    self.report.append(f"{src.name}: {name}: a symbolic link, skipped")
                    continue
                if name.startswith(("/", "\\")) or ".." in parts or not parts or re.match(r"^[A-Za-z]:", name):
                    self.report.append(f"{src.name}: {name!r}: a path outside the download, skipped")
                    continue
                ext = parts[-1].rsplit(".", 1)[-1].lower() if "." in parts[-1] else "(none)"
                if ext != "ipynb":
                    others[ext] = others.get(ext, 0) + 1
                    continue
                if info.file_size > MAX_NOTEBOOK:
                    self.report.append(f"{src.name}: {name}: {info.file_size >> 20} MB, larger than a notebook "
                                       f"can be ({MAX_NOTEBOOK >> 20} MB), skipped")
                    continue
                data = bytearray()
                with z.open(info) as f:  # the real size, whatever the entry's header says
                    while chunk := f.read(1 << 20):
                        data += chunk
                        if len(data) > MAX_NOTEBOOK:
                            break
                if len(data) > MAX_NOTEBOOK:
                    self.report.append(f"{src.name}: {name}: larger than {MAX_NOTEBOOK >> 20} MB, skipped")
                    continue
                total += len(data)
                if total > MAX_EXTRACTED:
                    raise LmsError(f"{src.name}: more than {MAX_EXTRACTED >> 30} GB of notebooks; "
                                   f"download the assignment in parts")
                safe = [re.sub(r"[\x00-\x1f/]+", "_", p)[:200] for p in parts]
                target = dest.joinpath(*safe)
                files.atomic_write_bytes(target, bytes(data))
        for ext, n in sorted(others.items()):
            what = "an archive inside the download (not opened: ask for the .ipynb)" if ext in ("zip", "gz", "tar",
                                                                                             "7z", "rar") else "not a notebook"
            self.report.append(f"{src.name}: {n} .{ext} file(s): {what}, skipped")
        return total


class LmsCollector(FileNameCollectorPlugin):
    """zip_collect's collector for LMS downloads: which student each notebook belongs to, from the
    course's class list (roster.json, `autograder/bin/lms roster`). A file gets its student's id and
    the student's own file name (the batch grader then matches it to the assignment's notebook by
    its graded cells, whatever the name); a file that fits nobody on the list is skipped and named
    in `self.matches` (and in nbgrader's log)."""

    def collect(self, submitted_file: str):
        if not hasattr(self, "matches"):
            self.matches: list[Match] = []
            self.taken: set[tuple[str, str]] = set()
            self.roster = load_roster(Path(self.parent.coursedir.root))
            self.base = Path(self.parent._format_collect_path(self.parent.extracted_directory))
        path = Path(submitted_file)
        if path.suffix.lower() != ".ipynb":
            return None
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            rel = path.name
        m = identify(rel, self.roster)
        self.matches.append(m)
        if m.student_id is None:
            self.log.warning("not collected: %s: %s", rel, m.why)
            return None
        own = CANVAS_FILE.match(path.name)
        original = own.group("file") if own else path.name
        moodle = MOODLE_PART.match(path.name)
        if moodle and moodle.group("file"):
            original = moodle.group("file")
        name = _safe_file_name(original)
        n = 2
        while (m.student_id, name) in self.taken:  # two files with one name: keep both, the grader picks
            name = _safe_file_name(f"{original.rsplit('.', 1)[0]} ({n}).ipynb")
            n += 1
        self.taken.add((m.student_id, name))
        return {"student_id": m.student_id, "file_id": name}


def collect(assignment: str, archives: list[Path], root: Path = ROOT) -> dict:
    """The LMS downloads of one assignment into root/submitted/ through nbgrader's zip_collect.

    Returns {"collected": {student: [files]}, "not_collected": [(file, why)], "missing": [students
    on the list without a notebook], "late": [students the LMS marks late], "skipped": [...]}."""
    from nbgrader.apps.zipcollectapp import ZipCollectApp
    from nbgrader.coursedir import CourseDirectory

    root = Path(root).resolve()
    roster = load_roster(root)
    if not list((root / "release" / assignment).glob("*.ipynb")):
        raise LmsError(f"no release/{assignment}/*.ipynb in {root}: is {assignment!r} an assignment of this course?")
    if not archives:
        raise LmsError("no download given: name the zip file(s) the LMS gave you")
    for a in archives:
        if not Path(a).is_file():
            raise LmsError(f"{a}: no such file")
    area = root / "downloaded" / assignment / "archive"
    if area.exists():
        files.rmtree(area)
    area.mkdir(parents=True)
    for a in archives:
        files.copy_regular(Path(a), area / Path(a).name, MAX_EXTRACTED)
    cfg = load_config(root, settings_from=root)
    cfg.ZipCollectApp.force = True
    cfg.ExtractorPlugin.force = True
    cfg.ZipCollectApp.extractor_plugin = LmsExtractor
    cfg.ZipCollectApp.collector_plugin = LmsCollector
    cfg.Application.log_level = "ERROR"
    app = ZipCollectApp(config=cfg)
    app.coursedir = CourseDirectory(config=cfg)
    app.coursedir.assignment_id = assignment
    app.init_plugins()
    try:
        app.extract_archive_files()
        app.process_extracted_files()
    except SystemExit:
        raise LmsError(f"nbgrader zip_collect stopped on {assignment} (see its message above)") from None
    matches = getattr(app.collector_plugin_inst, "matches", [])
    got: dict[str, list[str]] = {}
    for sid in sorted({m.student_id for m in matches if m.student_id}):
        folder = root / "submitted" / sid / assignment
        got[sid] = sorted(p.name for p in folder.glob("*.ipynb"))
    return {"collected": got,
            "not_collected": [(m.file, m.why) for m in matches if m.student_id is None],
            "missing": sorted(p.student_id for p in roster.people if p.student_id not in got),
            "late": sorted({m.student_id for m in matches if m.student_id and m.late}),
            "skipped": list(getattr(app.extractor_plugin_inst, "report", []))}


