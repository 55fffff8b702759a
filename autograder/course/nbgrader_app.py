"""nbgrader with the course's settings: start-up speedups, the configuration, generate_assignment,
nbgrader's own command line in a subprocess.
"""

from __future__ import annotations
import os
import subprocess
import sys
import warnings
from pathlib import Path
from autograder.course.layout import CONFIG, PACKAGE_HOME, ROOT, PipelineError

# nbgrader runs `alembic` as a command: the environment's scripts must be on PATH even when
# this file is run as .venv/bin/python without activating the environment.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


def _speedups() -> None:
    """Two start-up costs of nbgrader 0.9.6 that grading one notebook does not need.

    1. jsonschema (imported by nbformat) builds about 40 lark parsers for the optional
       rfc3987_syntax "iri" format checker: about 4.5 s per process on this class of CPU, and the
       notebook schema never uses that format. Marking the module absent skips it.
    2. A new gradebook asks a fresh `alembic heads` subprocess for the schema version (another
       4-5 s, since that process imports nbformat too); reading nbgrader's migration folder
       in-process gives the same answer.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
    import nbgrader.api

    def alembic_head() -> str:
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(nbgrader.api.__file__).parent / "alembic"))
        return ScriptDirectory.from_config(cfg).get_current_head()

    original = nbgrader.api.get_alembic_version

    def get_alembic_version() -> str:
        try:
            return alembic_head()
        except Exception:  # a layout this code does not know: nbgrader's own (slow) way
            return original()

    nbgrader.api.get_alembic_version = get_alembic_version
    # SQLAlchemy 2 warns about nbgrader 0.9.6's session use (SAWarning); the grades are right.
    warnings.filterwarnings("ignore", module=r"nbgrader\.api")


_speedups()

# ----------------------------------------------------------------------------- nbgrader

def load_config(root: Path = ROOT, settings_from: Path | None = None):
    """The course's nbgrader configuration, with the course directory moved to `root`.

    `settings_from`: a course folder whose own nbgrader_config.py (the instructor's settings, e.g.
    the late-penalty policy) is applied on top, as plain nbgrader would apply it there; the grader's
    scratch courses take their settings from the course they grade for. A link is never followed.
    (The repository's own two-line nbgrader_config.py only loads the course's settings again; the
    hub's course folder, where ROOT is the course folder itself, has its own settings in that file.)"""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    own = Path(settings_from) / "nbgrader_config.py" if settings_from is not None else None
    if own is not None and own.is_file() and not own.is_symlink():
        try:
            cfg.merge(PyFileConfigLoader(own.name, path=str(own.parent)).load_config())
        except Exception as e:  # the instructor's file: say which one and why, never a traceback
            raise PipelineError(f"{own} cannot be loaded ({type(e).__name__}: {str(e).strip()[:200]})") from None
    cfg.CourseDirectory.root = str(root)
    return cfg


def record_assignment(assignment: str, root: Path, release_dir: Path | None = None,
                      failure: str = "nbgrader generate_assignment failed", settings_from: Path | None = None) -> None:
    """nbgrader generate_assignment in the course at `root` (in-process, quiet): records the
    assignment's current cells in root's gradebook and writes the student version to `release_dir`
    (default: root/release). Raises PipelineError starting with `failure` and nbgrader's last line."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_config(root, settings_from=settings_from)
    if release_dir is not None:
        cfg.CourseDirectory.release_directory = str(release_dir)  # absolute: root/release stays as it is
    cfg.Application.log_level = "ERROR"
    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
    r = api.generate_assignment(assignment, force=True, create=True)
    if not r.get("success"):
        detail = (r.get("error") or r.get("log") or "").strip().splitlines()
        raise PipelineError(f"{failure}: {detail[-1] if detail else 'no detail'}")


def nbgrader(*args: str, cwd: Path = ROOT, quiet: bool = False) -> None:
    """Run one nbgrader command line in the course directory (its nbgrader_config.py loads ours)."""
    cmd = [sys.executable, "-m", "autograder.cli.course", "nbgrader", *args]
    # `-m` finds the package through PYTHONPATH: cwd is the course folder, which need not hold autograder/
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_HOME)] + [p for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run(cmd, cwd=cwd, text=True, capture_output=quiet, env=env)
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()[-20:] if quiet else []
        raise PipelineError("nbgrader " + " ".join(args) + " failed" + ("\n" + "\n".join(detail) if detail else ""))

