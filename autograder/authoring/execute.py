"""Running the source notebooks (`make execute`), releasing them (`make release`) and validating
both (`make validate`: sources earn every point, unmodified releases fail every test cell).
"""

from __future__ import annotations
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from autograder.course.layout import Lab, PipelineError, assignments, rel
from autograder.course.nbgrader_app import load_config, nbgrader

# ----------------------------------------------------------------------------- execute

def execute_one(path: str, timeout: int = 3600) -> str:
    """Run a source notebook top to bottom in its own folder and store the outputs in place."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.pop("NBGRADER_EXECUTION", None)  # the full experiments, not the graded shortcut
    p = Path(path)
    nb = nbformat.read(p, as_version=4)
    import tempfile

    from traitlets.config import Config

    # The kernel talks over unix sockets in a private folder, not TCP: nothing on the machine's ports,
    # and no "Kernel is running over TCP without encryption" warning per notebook. (An absolute socket
    # path: the kernel runs in the notebook's folder, the client here.)
    sockets = Path(tempfile.mkdtemp(prefix="llmrl-execute-"))
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(p.parent)}},
        record_timing=False, store_widget_state=False,
        config=Config({"KernelManager": {"transport": "ipc", "ip": str(sockets / "kernel")}}),
    )
    try:
        client.execute()
    except CellExecutionError as e:
        index = next((i for i, c in enumerate(nb.cells) if c.get("outputs") and
                      any(o.get("output_type") == "error" for o in c.outputs)), None)
        where = f" (cell {index + 1})" if index is not None else ""
        last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise PipelineError(f"{rel(p)}{where} failed while executing: {last}") from None
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    nbformat.write(nb, p)
    return rel(p)


def _parallel(fn, items, workers: int = 2):
    """Run fn over items in worker processes; collect PipelineErrors instead of stopping at the first."""
    results, errors = [], []
    if not items:
        return results, errors
    with ProcessPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(fn, *item) if isinstance(item, tuple) else pool.submit(fn, item) for item in items]
        for f in futures:
            try:
                results.append(f.result())
            except PipelineError as e:
                errors.append(str(e))
    return results, errors


def release(labs: list[Lab]) -> None:
    for a in assignments(labs):
        missing = [rel(lab.source) for lab in labs if lab.assignment == a and not lab.source.exists()]
        if missing:
            raise PipelineError(f"{', '.join(missing)} missing: run `make build A={a}` first")
        nbgrader("generate_assignment", a, "--force", "--log-level=ERROR")


def graded_test_cells(nb) -> list[str]:
    """grade_ids of the autograded code cells (tests, or graded answers) of a notebook."""
    return [
        c.metadata.nbgrader["grade_id"]
        for c in nb.cells
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
    ]


def validate_one(path: str, invert: bool) -> str:
    """nbgrader validate one notebook; raise naming every test cell with the wrong outcome.

    invert=False (a source notebook): every graded cell must earn full points.
    invert=True (an unmodified release): every graded cell must earn less than full points.
    """
    import nbformat
    from nbgrader.validator import Validator

    p = Path(path)
    nb = nbformat.read(p, as_version=4)
    by_source = {c.source.strip(): c.metadata.nbgrader["grade_id"]
                 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    validator = Validator(config=load_config(), invert=invert)
    results = validator.validate(str(p))
    if "type_changed" in results or "changed" in results:
        kind = "type_changed" if "type_changed" in results else "changed"
        ids = [by_source.get(c["source"], c["source"][:40]) for c in results[kind]]
        raise PipelineError(f"{rel(p)}: locked or graded cells were modified ({kind}): {', '.join(ids)}")
    if invert and results.get("passed"):
        ids = [by_source.get(c["source"], c["source"][:40]) for c in results["passed"]]
        raise PipelineError(
            f"{rel(p)}: the unmodified release PASSES test cell(s) {', '.join(ids)}: "
            "a test that passes on the stub tests nothing"
        )
    if not invert and results.get("failed"):
        lines = []
        for c in results["failed"]:
            err = (c.get("raw_error") or "").strip().splitlines()
            lines.append(f"{rel(p)}: cell {by_source.get(c['source'], '?')} fails: {err[-1] if err else 'error'}")
        raise PipelineError("\n".join(lines))
    n = len(graded_test_cells(nb))
    return f"{rel(p)}: {'all ' + str(n) + ' graded cells fail on the stubs' if invert else 'all tests pass'}"


def validate(labs: list[Lab]) -> None:
    items = []
    for lab in labs:
        for path in (lab.source, lab.release):
            if not path.exists():
                raise PipelineError(f"{rel(path)} missing: run `make build release A={lab.assignment}`")
        items += [(str(lab.source), False), (str(lab.release), True)]
    results, errors = _parallel(validate_one, items)
    for line in results:
        print("ok  " + line)
    if errors:
        raise PipelineError("\n".join(errors))


