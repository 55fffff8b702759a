"""What the set-up made, in D/manifest.json, so that `remove` takes away exactly that: the accounts it
created and the modes it took off the repository's instructor-only entries."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from hub.deploy.config import REPO, HubConfig

# The parts of this repository that hold solutions, hidden tests or grades: no hub account may read them
# (the accounts need only .venv and lib/, the environment and the course library).
INSTRUCTOR_ONLY = ("source", "notebooks", "autograder", "artifacts", ".git", "submitted", "autograded", "feedback",
                   "gradebook.db", "grades.csv", "batch_grades.csv", "collected")


def read_manifest(directory: Path) -> dict:
    path = directory / "manifest.json"
    if not path.exists():
        return {"users": [], "created_by": "llmrl hub.deploy", "repo": str(REPO)}
    return json.loads(path.read_text())


def write_manifest(cfg: HubConfig, manifest: dict) -> None:
    cfg.dir.mkdir(parents=True, exist_ok=True)
    tmp = cfg.manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(cfg.manifest)


def protect_repository(manifest: dict, cfg: HubConfig, log=print) -> list[str]:
    """Take read and search access for "other" off the repository's instructor-only entries (root and the
    repository's owner keep theirs); the old modes go into the manifest so that `remove` puts them back."""
    changed = []
    saved = manifest.setdefault("repo_modes", {})
    for name in INSTRUCTOR_ONLY:
        path = REPO / name
        if not path.exists() or path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o007:
            saved.setdefault(str(path), mode)
            path.chmod(mode & ~0o007)
            changed.append(name)
    write_manifest(cfg, manifest)
    if changed:
        log(f"repository: {', '.join(changed)} no longer readable by other accounts (restored by `make hub-remove`)")
    return changed


def restore_repository(manifest: dict) -> None:
    for path, mode in manifest.get("repo_modes", {}).items():
        p = Path(path)
        if p.exists() and not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o007 | (mode & 0o007))
