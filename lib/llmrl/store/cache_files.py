"""The checkpoint file format of the cache: a state dict with its metadata and a sha256 of the
weights, written atomically; a file that is missing, corrupted or stale reads as None.

The cache folder is ``$LLMRL_CACHE``, else ``~/.cache/llmrl`` (:func:`cache_dir`); what goes in it
(SFT runs other than the shipped ones, hw4's character model of another recipe) is decided by the
layers above (:mod:`llmrl.sft.checkpoints`, :mod:`llmrl.hw4.charlm`). Its old name,
:mod:`llmrl.store.checkpoint_files`, still imports.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path

import torch

FORMAT_VERSION = 1


def cache_dir() -> Path:
    d = Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl")
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_state(path: Path, state: dict, meta: dict) -> None:
    """Write a state dict and its ``meta`` (which should hold ``key`` and ``version``) to the cache
    file ``path``, with a sha256 of the weights; atomic. Raises OSError when it cannot write."""
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    meta = dict(meta, sha256=hashlib.sha256(payload).hexdigest())
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save({"meta": meta, "state": payload}, f)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one


def load_state(path: Path, expect_key: str):
    """(meta, state dict) of a file written by :func:`save_state`, or None when it is missing,
    corrupted (sha256 mismatch, unreadable) or stale (another key or format version)."""
    if not path.exists():
        return None
    try:
        blob = torch.load(path, weights_only=True)
        meta, payload = blob["meta"], blob["state"]
        if meta.get("key") != expect_key or meta.get("version") != FORMAT_VERSION:
            return None
        if hashlib.sha256(payload).hexdigest() != meta.get("sha256"):
            return None
        return meta, torch.load(io.BytesIO(payload), weights_only=True)
    except Exception:
        return None
