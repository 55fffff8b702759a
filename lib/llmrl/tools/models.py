"""The course's models: check the shipped ones, or rebuild them (instructors).

    python -m llmrl.tools.models                     check the shipped models against their manifest
                                               (``make warm``; seconds: nothing is trained)
    python -m llmrl.tools.models --rebuild-shipped [--parts sft lab21 charlm] [--out DIR] [--progress]
                                               train them again and write them with a new manifest

The labs' TinyLM checkpoints (teacher, student, sft) and hw4's character model ship with the
library (:mod:`llmrl.store.shipped`): the labs and the grader's kernels read them from the installed
package, so nothing needs to be built before a kernel starts. Only other configurations (lab21's
students of another width or a weaker snapshot) are trained on first use into the cache
(``$LLMRL_CACHE`` or ``~/.cache/llmrl``). ``python -m llmrl.tools.cache`` is this command's old name
and still runs it.

``--rebuild-shipped`` runs the two SFT recipes (the course's for the sft model, lab21's for its
teacher and student) and the character model's pretraining (a few minutes on one core), scans the
SFT snapshots, picks the student and the sft model closest to the published calibration
(:func:`llmrl.tools.rebuild_models.choose`) and writes the four files and ``MANIFEST.json`` into ``--out``
(default: the package's ``models/`` folder); ``--parts`` rebuilds some of them and keeps the
others' manifest entries. It prints the calibration of what it wrote. The result is another
release of the models: on another CPU the bits and possibly the chosen steps differ, so commit it
together with ``checkpoints.STUDENT_STEP`` / ``SFT_STEP`` (when the steps moved), the regenerated
notebooks and lab19's stored runs (docs/library.md, "The course's models").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def verify_shipped(progress: bool = False) -> None:
    """Check every shipped model (sha256 against the manifest); raises ShippedModelError. Builds
    nothing (``progress`` is accepted for the old callers of ``llmrl.tools.cache.warm`` and unused)."""
    from ..store.shipped import verify

    verify()


def _table(blob: dict) -> str:
    lines = [f"{'model':<11} {'step':>5} {'MB':>5}  sha256            calibration"]
    for name, e in blob["models"].items():
        cal = ", ".join(f"{k} {v:g}" for k, v in e["calibration"].items())
        lines.append(f"{name:<11} {e['step']:>5} {e['bytes'] / 1e6:5.2f}  {e['sha256'][:16]}  {cal}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m llmrl.tools.models") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rebuild-shipped", action="store_true", help="train the shipped models again")
    parser.add_argument("--out", type=Path, default=None, help="where --rebuild-shipped writes (default: the package)")
    parser.add_argument("--parts", nargs="+", default=None, metavar="PART",
                        help="with --rebuild-shipped: only these of sft (lab11 and lab19's model), lab21 (its teacher "
                             "and student), charlm (hw4's model); the others keep their files and entries")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    args = parser.parse_args(argv)
    from ..sft import checkpoints
    from ..store import shipped
    from . import rebuild_models

    if not args.rebuild_shipped:
        if args.out is not None or args.parts is not None:
            parser.error("--out and --parts go with --rebuild-shipped")
        try:
            shipped.verify()
        except shipped.ShippedModelError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(_table(shipped.manifest()))
        return 0
    parts = tuple(args.parts or rebuild_models.PARTS)
    unknown = [p for p in parts if p not in rebuild_models.PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (choose from {', '.join(rebuild_models.PARTS)})")
    blob = rebuild_models.rebuild(args.out, progress=args.progress, parts=parts)
    print(_table(blob))
    print(f"built with torch {blob['built']['torch']} on {blob['built']['cpu_capability']}; "
          f"written to {args.out or shipped.MODELS_DIR}")
    steps = {"student": blob["models"]["student"]["step"], "sft": blob["models"]["sft"]["step"]}
    if steps != {"student": checkpoints.STUDENT_STEP, "sft": checkpoints.SFT_STEP}:
        print(f"the chosen steps moved: set STUDENT_STEP = {steps['student']} and SFT_STEP = {steps['sft']} in "
              "lib/llmrl/sft/checkpoints.py (lib/tests/test_calibration.py checks that they agree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
