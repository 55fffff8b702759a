"""The student's functions, as the trainer takes them: from a namespace or from a notebook file.

hw4's notebook asks for eight functions (:data:`REQUIRED`). The trainer receives them bundled in an
:class:`Impl`. ``load_impl(PATH)`` reads a notebook (``.ipynb``, or a jupytext percent ``.py``) and
executes only the top-level ``import`` statements and the ``def`` of the required functions found
in its code cells, never the rest (no experiments, no tests). ``load_impl("reference")`` does the
same with the course's source notebook (``source/hw4/llm_rl.ipynb``, else its jupytext source
``notebooks/hw4/llm_rl.py``): the reference solutions live only there.
"""

from __future__ import annotations

import ast
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from ..utils import repo_root as utils_repo_root

REQUIRED = (
    "compute_per_token_logprobs",
    "build_completion_mask",
    "approx_kl_from_logprobs",
    "iter_minibatches",
    "compute_group_advantages",
    "maybe_normalize_advantages",
    "reinforce_loss",
    "grpo_loss",
)


@dataclass(frozen=True)
class Impl:
    """The eight student functions (signatures and shapes: see the hw4 notebook)."""

    compute_per_token_logprobs: Callable
    build_completion_mask: Callable
    approx_kl_from_logprobs: Callable
    iter_minibatches: Callable
    compute_group_advantages: Callable
    maybe_normalize_advantages: Callable
    reinforce_loss: Callable
    grpo_loss: Callable
    source: str = "namespace"

    def __post_init__(self):
        for f in fields(self):
            if f.name != "source" and not callable(getattr(self, f.name)):
                raise TypeError(f"{f.name} must be a function, got {type(getattr(self, f.name)).__name__}")

    @classmethod
    def from_namespace(cls, ns: dict, source: str = "namespace") -> "Impl":
        """Pick the required functions out of a dict such as a notebook's ``globals()``."""
        missing = [n for n in REQUIRED if n not in ns]
        if missing:
            raise ValueError(f"{source} does not define {missing}")
        return cls(**{n: ns[n] for n in REQUIRED}, source=source)


def repo_root() -> Path:
    return utils_repo_root() or Path(__file__).resolve().parents[3]


def _code_cells(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        try:
            nb = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not a valid .ipynb file: {e}") from None
        cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
    if path.suffix == ".py":  # jupytext percent format: split at "# %%" headers, skip markdown cells
        cells, cur, markdown = [], [], False
        for line in text.splitlines():
            if line.startswith("# %%"):
                if cur and not markdown:
                    cells.append("\n".join(cur))
                cur, markdown = [], "[markdown]" in line
            else:
                cur.append(line)
        if cur and not markdown:
            cells.append("\n".join(cur))
        return cells
    raise ValueError(f"impl must be 'reference' or a path to a .ipynb or .py notebook, got {str(path)!r}")


def load_impl(impl: str | os.PathLike) -> Impl:
    """The required functions from a notebook file, or from the course's source notebook ("reference")."""
    if isinstance(impl, Impl):
        return impl
    if impl == "reference":
        root = repo_root()
        for cand in (root / "source" / "hw4" / "llm_rl.ipynb", root / "notebooks" / "hw4" / "llm_rl.py"):
            if cand.exists():
                return load_impl(cand)
        raise FileNotFoundError("the reference solutions live in source/hw4/llm_rl.ipynb, which is not here "
                                "(a student copy has none): pass --impl path/to/your/llm_rl.ipynb")
    path = Path(impl)
    if not path.exists():
        raise FileNotFoundError(f"impl notebook {str(path)!r} does not exist")
    keep = []
    for src in _code_cells(path):
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]  # magics
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError as e:
            raise ValueError(f"{path}: a code cell does not parse ({e.msg}, line {e.lineno})") from None
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) or (
                    isinstance(node, ast.FunctionDef) and node.name in REQUIRED):
                keep.append(node)
    module = ast.Module(body=keep, type_ignores=[])
    import torch  # the namespace a notebook cell would see after its imports
    ns = {"__name__": f"hw4_impl_{path.stem}", "torch": torch, "math": math,
          "F": torch.nn.functional, "Iterator": __import__("typing").Iterator}
    exec(compile(module, str(path), "exec"), ns)
    return Impl.from_namespace(ns, source=str(path))
