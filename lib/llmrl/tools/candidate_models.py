"""A calibration candidate in place of the shipped models, for the lab19 and lab21 searches.

:func:`models_copy` writes a copy of the shipped models folder in which some roles' weights are a
candidate's (their manifest entries updated, so the usual sha256 check still holds);
:func:`shipped_as` points the library at such a folder, with the SFT runs that made it, for the
length of a ``with`` block (forked workers started inside it inherit the change).
:func:`read_record` and :func:`save_record` keep a search's judged rows in its committed JSON files.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path

import torch

from ..sft import checkpoints
from ..store import shipped


def models_copy(out: Path, weights: dict[str, tuple[Path, int]], recipe: str) -> Path:
    """``out``: the shipped models folder with each role of ``weights`` (role -> (state file, SFT step))
    replaced and its manifest entry given the new file's sha256, size, the step and ``recipe``.

    The copy is made beside ``out`` and renamed into place, so a half-written copy is never used; a
    complete one (its manifest written) is returned as it is."""
    out = Path(out)
    if (out / shipped.MANIFEST_NAME).exists():
        return out
    unknown = sorted(set(weights) - set(shipped.FILES))
    if unknown:
        raise ValueError(f"no shipped model role {unknown}; the roles are {sorted(shipped.FILES)}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(shipped.MODELS_DIR, tmp)
    blob = json.loads((tmp / shipped.MANIFEST_NAME).read_text())
    for role, (state_file, step) in weights.items():
        buf = io.BytesIO()
        torch.save(torch.load(state_file, weights_only=True), buf)
        data = buf.getvalue()
        (tmp / shipped.FILES[role]).write_bytes(data)
        blob["models"][role].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), step=step,
                                    recipe=recipe)
    (tmp / shipped.MANIFEST_NAME).write_text(json.dumps(blob, indent=1) + "\n")
    tmp.rename(out)
    return out


@contextlib.contextmanager
def shipped_as(models_dir: Path, runs: dict[str, tuple]):
    """Within: the library loads its shipped models from ``models_dir`` and knows ``runs`` (role ->
    (SFTConfig, {role: Snapshot})) as the runs that made them; both are put back afterwards, also
    when the block raises."""
    old_dir, old_runs = shipped.MODELS_DIR, dict(checkpoints.SHIPPED_RUNS)
    shipped.MODELS_DIR = Path(models_dir)
    checkpoints.SHIPPED_RUNS.update(runs)
    try:
        yield
    finally:
        shipped.MODELS_DIR = old_dir
        checkpoints.SHIPPED_RUNS.clear()
        checkpoints.SHIPPED_RUNS.update(old_runs)


def read_record(folder: Path, name: str) -> list[dict]:
    """The rows of the committed record ``folder/name.json`` ([] when there is none yet)."""
    path = Path(folder) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else []


def save_record(folder: Path, name: str, rows: list[dict], key) -> None:
    """Merge ``rows`` into the record ``folder/name.json`` (a row replaces the one with its ``key``),
    sorted by ``key``."""
    keep = {key(r): r for r in read_record(folder, name)}
    keep.update({key(r): r for r in rows})
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{name}.json").write_text(json.dumps(sorted(keep.values(), key=key), indent=1) + "\n")
