"""The labs in a real JupyterLab, in a real browser (chromium, driven by Playwright).

One JupyterLab server for the whole module, started on 127.0.0.1 with a random free port and token
in a temporary copy of the course directory (jlab.LabServer), with LLMRL_FAST=1 in its environment so
that experiment cells shrink (llmrl.utils.grading_mode() is then true in its kernels).

* Every source notebook (source/*/*.ipynb): Run All; no cell shows an error; every plot the stored
  reference run shows appears as a loaded image; every widget renders, and moving each of its sliders
  changes what it shows; every progress bar renders and finishes (none left red or part-way).
  Cells that hide a plot or a widget under grading_mode() are run again with LLMRL_FAST=0 in the
  kernel (a warning names them), so that what a student sees is checked too.
* Every release notebook (release/*/*.ipynb) as a student meets it: its instructions render; each
  task's visible test fails with NotImplementedError while the task is unfilled; after the answer
  (the source notebook's solution cell) is typed into the task cell, that test passes; the rest of
  the notebook then runs without an error.
* nbgrader's formgrader opens inside the same JupyterLab and lists every assignment of source/.

A screenshot of each notebook after its run goes to artifacts/browser/ (and one of each widget after
its sliders moved, and of the formgrader). The server is stopped (its process group, then any kernel
left, by pid) whatever happens, and its temporary folders are removed.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import pytest

from autograder.tests.browser import jlab

REPO = jlab.REPO
SHOTS = REPO / "artifacts" / "browser"
SOURCES = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("source/*/*.ipynb"))
RELEASES = sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("release/*/*.ipynb"))
RUN_TIMEOUT_S = 900  # Run All of one notebook on a loaded 2-core machine; the slowest takes about 2 min
SLIDER_TIMEOUT_MS = 60_000  # the kernel recomputes the view (sampling 100 problems x 8 takes ~1 s idle)


def _name(path: str) -> str:
    return path.removesuffix(".ipynb").replace("/", "-")


def _read_nb(path: Path) -> dict:
    return json.loads(path.read_text())


def _errors(cells: list[dict]) -> list[str]:
    found = []
    for i, c in enumerate(cells):
        for o in c.get("outputs", []) or []:
            if o.get("output_type") == "error":
                found.append(f"cell {i}: {o.get('ename')}: {o.get('evalue')}")
    return found


def _expected(cell: dict) -> dict:
    """What a stored (executed) source cell shows: images, widgets, progress bars."""
    outs = cell.get("outputs", []) or []
    return {"images": sum("image/png" in o.get("data", {}) for o in outs),
            "widgets": sum(jlab.WIDGET_MIME in o.get("data", {}) and not jlab.is_tqdm(o) for o in outs),
            "bars": sum(jlab.is_tqdm(o) for o in outs)}


@pytest.fixture(scope="module")
def summary():
    data: dict = {"notebooks": {}}
    yield data
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "summary.json").write_text(json.dumps(data, indent=1))


@pytest.fixture(scope="module")
def server():
    if SHOTS.exists():
        shutil.rmtree(SHOTS)
    SHOTS.mkdir(parents=True)
    srv = jlab.LabServer({"LLMRL_FAST": "1"})
    try:
        yield srv
    finally:
        srv.stop()
    assert not srv.tmp.exists(), "the temporary runtime folder was not removed"


@pytest.fixture(scope="module")
def context(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = jlab.launch_browser(p)
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            ctx.state = {"news_dismissed": False}
            yield ctx
        finally:
            browser.close()


@pytest.fixture
def open_notebook(server, context):
    pages = []

    def _open(path: str) -> jlab.NotebookPage:
        page = jlab.NotebookPage(context, server, path, SHOTS, timeout_s=RUN_TIMEOUT_S)
        pages.append(page)
        # JupyterLab asks once (on the first page) whether to fetch Jupyter news: answer No.
        if not context.state["news_dismissed"]:
            context.state["news_dismissed"] = page.dismiss_news(wait_s=10)
        return page

    yield _open
    for page in pages:
        page.close()
    server.shutdown_kernels()


def _move_every_slider(nb: jlab.NotebookPage, i: int, name: str) -> list[str]:
    """Move each slider of cell i; return the failures (a slider whose move changed nothing).

    A widget's view is its HTML and its images. After a move the kernel redraws: the test waits until
    the kernel is idle again and the view has settled, then asks that every image changed (a plot
    that needs a refresh shows the old picture) or, in a widget without images, some HTML did."""
    problems = []
    sliders = nb.dom(i)["sliders"]
    for k, s in enumerate(sliders):
        before = json.loads(nb.view(i))
        before_readout = nb.dom(i)["sliders"][k]["readout"]
        nb.move_slider(i, k)
        changed = ("([i, v]) => { const now = JSON.parse(__bt.view(i));"
                   " return (v.imgs.length ? now.imgs.every((x, j) => x !== v.imgs[j]) : now.html.join() !== v.html.join())"
                   " && __bt.kernelStatus() === 'idle' && !/Loading widget/.test(__bt.cells()[i].node.innerText); }")
        try:
            nb.page.wait_for_function(changed, arg=[i, before], timeout=SLIDER_TIMEOUT_MS, polling=200)
            nb.wait_settled(i)
        except Exception:
            after = nb.dom(i)["sliders"][k]["readout"]
            problems.append(f"cell {i}: moving slider {s['label']!r} ({before_readout} -> {after}) did not "
                            f"redraw {'every image' if before['imgs'] else 'the text'} within "
                            f"{SLIDER_TIMEOUT_MS // 1000} s")
            continue
        after = nb.dom(i)["sliders"][k]["readout"]
        if after == before_readout:
            problems.append(f"cell {i}: slider {s['label']!r} readout stayed at {after} after the move")
    nb.screenshot_cell(i, f"{name}-cell{i:02d}-widget.png")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=[_name(p) for p in SOURCES])
def test_source_notebook_runs_in_jupyterlab(path, server, open_notebook, summary):
    t0 = time.monotonic()
    name = _name(path)
    stored = _read_nb(REPO / path)["cells"]
    nb = open_notebook(path)
    done = nb.run_all()
    cells = nb.model()["cells"]
    assert len(cells) == len(stored), "JupyterLab shows a different number of cells than the file has"
    errors = _errors(cells)
    assert done.get("ok") and not errors, f"{path}: Run All stopped: {done} {errors}"

    # Cells that hide a plot or a widget under grading_mode(): run them again as a student would see
    # them (LLMRL_FAST=0 in the kernel), and say so.
    hidden = []
    for i, (c, ref) in enumerate(zip(cells, stored)):
        want, got = _expected(ref), _expected(c)
        if (got["images"] < want["images"] or got["widgets"] < want["widgets"]) and "grading_mode()" in jlab.cell_text(c):
            hidden.append(i)
    if hidden:
        warnings.warn(f"{path}: cells {hidden} show their plots or widgets only when grading_mode() is false; "
                      "under LLMRL_FAST=1 they hide them, so the test runs them again with LLMRL_FAST=0")
        assert nb.silent("import os; os.environ['LLMRL_FAST'] = '0'") == "ok"
        for i in hidden:
            nb.run_cell(i)
        assert nb.silent("import os; os.environ['LLMRL_FAST'] = '1'") == "ok"
        cells = nb.model()["cells"]
        errors = _errors(cells)
        assert not errors, f"{path}: cells run again with LLMRL_FAST=0 failed: {errors}"

    nb.page.wait_for_timeout(1000)
    unrendered = nb.unrendered_markdown()
    problems, report = [], {"hidden_under_fast": hidden, "widgets": 0, "sliders": 0, "images": 0, "bars_seen": 0}
    for i, (c, ref) in enumerate(zip(cells, stored)):
        want, got = _expected(ref), _expected(c)
        dom = nb.dom(i)
        if i in unrendered:
            problems.append(f"cell {i}: markdown not rendered")
        if c["cell_type"] != "code":
            continue
        # Plots: every image the stored run shows is there and has loaded.
        if got["images"] < want["images"]:
            problems.append(f"cell {i}: {want['images']} plot(s) in the stored run, {got['images']} here")
        if dom["imagesLoaded"] < got["images"]:
            problems.append(f"cell {i}: {got['images']} image output(s), {dom['imagesLoaded']} shown")
        report["images"] += dom["imagesLoaded"]
        # Widgets: rendered (no error text, not stuck loading), and each slider changes the view.
        if got["widgets"] < want["widgets"]:
            problems.append(f"cell {i}: {want['widgets']} widget(s) in the stored run, {got['widgets']} here")
        if dom["widgetErrors"] or dom["loading"]:
            problems.append(f"cell {i}: a widget did not render ({'error' if dom['widgetErrors'] else 'still loading'})")
        if got["widgets"]:
            if dom["widgets"] == 0:
                problems.append(f"cell {i}: widget output but nothing rendered")
            report["widgets"] += got["widgets"]
            report["sliders"] += len(dom["sliders"])
            problems += _move_every_slider(nb, i, name)
        # Progress bars still on the page are finished and not red.
        for b in dom["bars"]:
            if b["danger"] or (b["visible"] and b["width"] not in ("100%", "")):
                problems.append(f"cell {i}: a progress bar was left at {b['width']} (danger: {b['danger']})")

    # Progress bars: one was drawn in every cell that made one; none ended red or part-way.
    # (tqdm removes a finished bar with leave=False, so the record is kept while the notebook runs.)
    bars = nb.bars_seen()
    report["bars_seen"] = len(bars)
    for i, c in enumerate(cells):
        if _expected(c)["bars"] and not any(b["cell"] == str(i) for b in bars):
            problems.append(f"cell {i}: made a progress bar that never showed in the page")
    for b in bars:
        if b["danger"]:
            problems.append(f"cell {b['cell']}: a progress bar turned red (stopped before its total)")
    assert SOURCES, "no source notebooks"
    nb.screenshot_notebook(f"{name}.png")
    report["seconds"] = round(time.monotonic() - t0, 1)
    summary["notebooks"][path] = report
    assert not problems, f"{path}:\n" + "\n".join(problems)


def _tasks(cells: list[dict]) -> list[tuple[int, int]]:
    """(task cell, its test cell) pairs: a code solution cell and the next graded code cell."""
    pairs = []
    for i, c in enumerate(cells):
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c["cell_type"] == "code" and meta.get("solution") and not meta.get("grade"):
            test = next((j for j in range(i + 1, len(cells))
                         if cells[j]["cell_type"] == "code" and cells[j].get("metadata", {}).get("nbgrader", {}).get("grade")
                         and not cells[j]["metadata"]["nbgrader"].get("solution")), None)
            if test is not None:
                pairs.append((i, test))
    return pairs


@pytest.mark.parametrize("path", RELEASES, ids=[_name(p) for p in RELEASES])
def test_release_notebook_as_a_student(path, server, open_notebook, summary):
    t0 = time.monotonic()
    name = _name(path)
    source_path = REPO / path.replace("release/", "source/", 1)
    assert source_path.exists(), f"{path} has no source notebook {source_path.relative_to(REPO)}"
    solutions = {c["metadata"]["nbgrader"]["grade_id"]: jlab.strip_solution_markers(jlab.cell_text(c))
                 for c in _read_nb(source_path)["cells"]
                 if c.get("metadata", {}).get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}
    nb = open_notebook(path)
    cells = nb.model()["cells"]
    problems = []

    # The instructions render: every markdown cell is rendered, and the first has a title.
    md = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    assert md, f"{path}: no instructions (markdown cells)"
    unrendered = nb.unrendered_markdown()
    assert not unrendered, f"{path}: markdown cells {unrendered} are not rendered"
    title = nb.page.locator(f'[data-bt-cell="{md[0]}"] .jp-RenderedMarkdown h1, '
                            f'[data-bt-cell="{md[0]}"] .jp-RenderedMarkdown h2')
    assert title.count() >= 1, f"{path}: the first markdown cell shows no title"

    tasks = _tasks(cells)
    if not tasks:
        # A notebook of written answers only (manually graded markdown cells): it runs as it is.
        written = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                   and c.get("metadata", {}).get("nbgrader", {}).get("solution")]
        assert written, f"{path}: neither code tasks with tests nor written answers to grade"
    report = {"tasks": len(tasks), "failed_unfilled": 0, "passed_filled": 0}
    pos = 0
    for task, test in tasks:
        gid = cells[task]["metadata"]["nbgrader"]["grade_id"]
        # Everything up to the test cell, the unfilled task included, runs without an error...
        for j in range(pos, test):
            if cells[j]["cell_type"] == "code":
                errs = _errors([{"outputs": nb.run_cell(j)}])
                if errs:
                    problems.append(f"cell {j} (before the test of {gid}) failed: {errs}")
        # ...and the visible test of the unfilled task fails with a clear message.
        outs = nb.run_cell(test)
        enames = [o.get("ename") for o in outs if o.get("output_type") == "error"]
        if enames != ["NotImplementedError"]:
            problems.append(f"{gid}: the test cell {test} of the unfilled task gave {enames or 'no error'}, "
                            "not NotImplementedError")
        elif "NotImplementedError" not in nb.page.locator(f'[data-bt-cell="{test}"] .jp-OutputArea').inner_text():
            problems.append(f"{gid}: the NotImplementedError of test cell {test} is not shown on the page")
        else:
            report["failed_unfilled"] += 1
            if report["failed_unfilled"] == 1:  # what a student sees at the first unfilled task
                nb.screenshot_cell(test, f"{name}-cell{test:02d}-unfilled.png")
        # The student types the answer into the task cell and runs it, then the test again.
        assert gid in solutions, f"{path}: task {gid} has no solution cell in {source_path.name}"
        nb.type_into(task, solutions[gid])
        typed = nb.source(task)
        if typed.strip() != solutions[gid].strip():
            problems.append(f"{gid}: the typed answer differs from the solution in the editor")
        for j in range(task, test + 1):
            if cells[j]["cell_type"] == "code":
                errs = _errors([{"outputs": nb.run_cell(j)}])
                if errs:
                    problems.append(f"{gid}: with the answer typed in, cell {j} failed: {errs}")
                elif j == test:
                    report["passed_filled"] += 1
        pos = test + 1
    # With every task done, the rest of the notebook (experiments, plots) runs.
    for j in range(pos, len(cells)):
        if cells[j]["cell_type"] == "code":
            errs = _errors([{"outputs": nb.run_cell(j)}])
            if errs:
                problems.append(f"cell {j} (after the last task) failed: {errs}")
    nb.screenshot_notebook(f"{name}.png")
    report["seconds"] = round(time.monotonic() - t0, 1)
    summary["notebooks"][path] = report
    assert not problems, f"{path}:\n" + "\n".join(problems)


def test_formgrader_lists_the_assignments(server, open_notebook):
    assignments = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    assert assignments, "no assignments in source/"
    nb = open_notebook(SOURCES[0])  # any page of the same JupyterLab
    page = nb.page
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.get_by_role("menuitem", name="Formgrader").click()
    frame = page.frame_locator("iframe[src*='formgrader']")
    for a in assignments:
        frame.get_by_role("link", name=a, exact=True).first.wait_for(timeout=60_000)
    rows = frame.locator("table tr").all_inner_texts()
    listed = [a for a in assignments if any(re.search(rf"\b{re.escape(a)}\b", r) for r in rows)]
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "formgrader.png"))
    assert listed == assignments, f"formgrader lists {listed}, source/ has {assignments}"
