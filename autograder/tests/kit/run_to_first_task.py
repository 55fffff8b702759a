"""Run one notebook up to its first unfilled task, in the Python that runs this script.

    python run_to_first_task.py NOTEBOOK.ipynb RESULT.json

The install test runs it with the student kit's own environment (never this repository's), so it
imports only what the kit installed: nbformat and nbclient come with JupyterLab. A first cell added
here reports which Python and which llmrl the kernel uses. Cells run in order until one raises (its
error is recorded and nothing after it runs) or until the first written answer (a markdown cell
the student fills in). RESULT.json: {"kernel": {...}, "ran": [cell ids], "stopped": {...} or null}.
"""

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

PROBE = """import json, sys, llmrl, torch
print("KIT-PROBE " + json.dumps({"executable": sys.executable, "prefix": sys.prefix,
      "llmrl": llmrl.__file__, "torch": torch.__version__, "path": sys.path}))"""


def main(path: str, result_path: str) -> int:
    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell(PROBE)
    probe["id"] = "kit-probe"
    nb.cells.insert(0, probe)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(Path(path).parent)}})
    result = {"kernel": None, "ran": [], "stopped": None}
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "markdown" and meta.get("solution"):
                result["stopped"] = {"id": cell.get("id"), "kind": "written answer", "grade_id": meta.get("grade_id")}
                break
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, i)
            except CellExecutionError as e:
                result["stopped"] = {"id": cell.get("id"), "kind": "error", "ename": e.ename,
                                     "evalue": str(e.evalue)[:500], "grade_id": meta.get("grade_id")}
                break
            result["ran"].append(cell.get("id"))
            if i == 0:
                for out in cell.get("outputs", []):
                    for line in out.get("text", "").splitlines():
                        if line.startswith("KIT-PROBE "):
                            result["kernel"] = json.loads(line[len("KIT-PROBE "):])
    Path(result_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
