"""File helpers the set-up's steps share."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path


def chown_tree(path: Path, name: str) -> None:
    pw = pwd.getpwnam(name)
    for p in [path, *path.rglob("*")]:
        os.lchown(p, pw.pw_uid, pw.pw_gid)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
