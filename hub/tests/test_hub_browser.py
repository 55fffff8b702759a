"""The course on the hub in a real browser (Debian's chromium through Playwright), clicked as people would.

The instructor logs in, opens the formgrader from the hub's home page (a new tab: the hub forbids
framing it) and releases lab11; a student logs in with the OS password, lands in JupyterLab,
fetches lab11 from nbgrader's assignment list, opens the notebook, runs its first code cell (the
course library imports in the student's own kernel) and saves, then submits from the assignment
list; the instructor collects in the formgrader and finds the submission on the assignment's
submissions page. Then a hostile student's submission (scripts, handlers, SVG, links, widgets,
attachments, requests to the course service) is opened on the formgrader's Manual Grading page:
nothing of it runs. Screenshots: artifacts/hub/browser/.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import textwrap
import time
from pathlib import Path

import pytest

from autograder.tests.browser import jlab  # chromium's flags for this machine
from hub import deploy
from hub.tests.common import ARTIFACTS, INSTRUCTOR

STUDENT = "llmrl-t-s4"
A, NB = "lab11", "llm_as_policy"
SHOTS = ARTIFACTS / "browser"
LONG_MS = 180_000  # a server start or a kernel's first cell on a loaded 2-core machine


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if SHOTS.exists():
        for p in SHOTS.glob("*.png"):
            p.unlink()
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = jlab.launch_browser(p)
        try:
            yield b
        finally:
            b.close()


def expect(locator):
    from playwright.sync_api import expect as _expect
    return _expect(locator)


def shot(page, name: str) -> None:
    page.wait_for_timeout(300)
    page.screenshot(path=str(SHOTS / name))


def log_in(browser, hub, user: str, next_path: str = ""):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{hub.url}/hub/login" + (f"?next={next_path}" if next_path else ""))
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    page.click("#login_submit")
    return ctx, page


def formgrader_modal(page, what: str) -> str:
    """Wait for the formgrader's result dialog and check that it reports success; its text."""
    page.wait_for_selector("#success-modal, #error-modal", state="visible", timeout=LONG_MS)
    error = page.locator("#error-modal")
    assert error.count() == 0, f"{what}: the formgrader reports an error:\n{error.inner_text()[:2000]}"
    return page.locator("#success-modal").inner_text()


def close_modal(page) -> None:
    page.locator("#success-modal").get_by_role("button", name="OK").click()
    page.wait_for_selector("#success-modal", state="hidden", timeout=30_000)


@pytest.fixture
def pages():
    """Pages to photograph if the test fails (what the person would have seen)."""
    open_pages: dict = {}
    yield open_pages
    for name, page in open_pages.items():
        try:
            if not page.is_closed():
                page.screenshot(path=str(SHOTS / f"last-{name}.png"))
        except Exception:
            pass


def test_a_student_fetches_runs_and_submits_and_the_instructor_sees_it(course_hub, browser, pages):
    hub, cfg = course_hub, course_hub.cfg

    fg, row = _instructor_releases_in_the_formgrader(browser, hub, pages)
    sp, fetched = _student_fetches_from_the_assignment_list(browser, hub, pages)
    saved, ran_s = _student_runs_the_first_cell_and_saves(sp, fetched)

    # Back in the assignment list: submit.
    sp.locator(".lm-TabBar-tab:has-text('Assignments')").first.click()
    fetched.get_by_role("button", name="Submit").click()
    submitted = sp.locator(f"#submitted_assignments_list .list_item:has-text('{A}')")
    submitted.wait_for(timeout=LONG_MS)
    shot(sp, "06-student-submitted.png")
    stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", submitted.inner_text())
    assert stamp, f"no submission time shown: {submitted.inner_text()!r}"

    # The instructor collects and sees the submission.
    fg.reload()
    row.wait_for(timeout=LONG_MS)
    row.locator("td.collect a").click()
    formgrader_modal(fg, "collect")
    close_modal(fg)
    expect(row.locator("td.num-submissions")).to_have_text("1", timeout=60_000)
    shot(fg, "07-formgrader-collected.png")
    count = row.locator("td.num-submissions a")
    if count.count():
        count.click()
    else:  # the count is plain text in this nbgrader: the submissions page is one more click away in the menu
        fg.goto(f"{hub.url}/services/{deploy.COURSE_ID}/formgrader/manage_submissions/{A}")
    fg.wait_for_selector(f"table tr:has-text('{STUDENT}')", timeout=LONG_MS)
    shot(fg, "08-formgrader-submission-listed.png")
    collected = cfg.course_dir / "submitted" / STUDENT / A / f"{NB}.ipynb"
    assert json.loads(collected.read_text())["cells"] == saved["cells"], "the collected notebook is not the saved one"
    (SHOTS / "summary.json").write_text(json.dumps({"first_cell_s": round(ran_s, 1), "submitted_at": stamp.group(0)}))


# ----------------------------------------------------------------------------- class 1: a script in the formgrader

HOSTILE = "llmrl-t-s5"


def hostile_cells(mark: str) -> list[dict]:
    """What a student can put in front of the grader, every piece trying to run as the grader: set a global,
    write a file through the course service's API (as the grader), or just make the browser request the
    service. Markdown (raw HTML, links, an attachment), and code whose outputs appear when the grader runs
    it: HTML, JavaScript, SVG, markdown, LaTeX, a widget (its state goes into the graded notebook)."""
    put = (f"fetch('/services/{deploy.COURSE_ID}/api/contents/pwned-{mark}.txt', {{method: 'PUT', "
           "headers: {'Content-Type': 'application/json', 'X-XSRFToken': (document.cookie.match(/_xsrf=([^;]+)/)"
           "||[])[1]}, body: JSON.stringify({type: 'file', format: 'text', content: 'pwned'})})")
    js = f"window.pwned_{mark} = (window.pwned_{mark} || 0) + 1; {put};"
    img = f"/services/{deploy.COURSE_ID}/formgrader/api/pwned-{mark}"
    md = (f"## My answer\n\nsee-{mark}\n\n<script>{js}</script>\n\n<img src=x onerror=\"{js}\">\n\n"
          f"<svg onload=\"{js}\"><script>{js}</script></svg>\n\n<a href=\"javascript:{js}\">click me</a>\n\n"
          f"<img src=\"{img}-md\"> <iframe src=\"/services/{deploy.COURSE_ID}/api/contents\"></iframe>\n\n"
          f"<style>body {{ background: url({img}-css) }}</style>\n\n![att](attachment:page.html)")
    page = base64.b64encode(f"<script>{js}</script>".encode()).decode()
    code = f"JS, IMG, MARK = {js!r}, {img!r}, {mark!r}\n" + textwrap.dedent("""
        from IPython.display import HTML, Javascript, SVG, Markdown, Latex, display
        print("see-" + MARK + "-code")
        display(HTML("<b>html-" + MARK + "</b><script>" + JS + "</script><img src=x onerror=\\"" + JS + "\\">"
                     "<img src=\\"" + IMG + "-html\\">"))
        display(Javascript(JS))
        display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="' + JS + '"><script>' + JS + '</script>'
                    '<circle r="4"/></svg>'))
        display(Markdown('<img src=x onerror="' + JS + '"> md-' + MARK))
        display(Latex("<script>" + JS + "</script>"))
        try:
            import ipywidgets
            display(ipywidgets.HTML('<img src=x onerror="' + JS + '">'))
        except ImportError:
            pass
    """)
    return [{"cell_type": "markdown", "metadata": {}, "id": "hostile-md", "source": md,
             "attachments": {"page.html": {"text/html": page}}},
            {"cell_type": "code", "metadata": {}, "id": "hostile-code", "source": code, "outputs": [],
             "execution_count": None}]


def test_manual_grading_shows_a_hostile_submission_inert(course_hub, browser, pages):
    hub, cfg = course_hub, course_hub.cfg
    mark = secrets.token_hex(6)
    fg, sub_id = _hostile_submission_graded(course_hub, mark)
    url = f"{hub.url}/services/{deploy.COURSE_ID}/formgrader/submissions/{sub_id}/"
    log_before = len(hub.hub.log_path.read_text(errors="replace"))

    ctx, page = log_in(browser, hub, INSTRUCTOR, next_path=f"/services/{deploy.COURSE_ID}/formgrader/")
    pages["manual-grading"] = page
    requests, console = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: console.append(m.text))
    page.wait_for_url(f"**/services/{deploy.COURSE_ID}/formgrader/**", timeout=LONG_MS)
    page.goto(url)
    page.wait_for_selector("#notebook-container", timeout=LONG_MS)
    page.wait_for_timeout(3000)  # a handler, a fetch or a widget loader would have run by now
    shot(page, "09-manual-grading-hostile.png")
    text = page.locator("#notebook-container").first.inner_text()
    assert f"see-{mark}" in text and f"html-{mark}" in text and f"see-{mark}-code" in text, text[:2000]
    assert page.evaluate(f"() => window.pwned_{mark}") is None, "a script of the student's ran as the grader"
    hit = [u for u in requests if mark in u]
    assert not hit, f"the grader's browser requested what the student chose: {hit}"
    assert not list(cfg.course_dir.rglob(f"pwned-{mark}*")), "the student's script wrote into the course folder"
    assert mark not in hub.hub.log_path.read_text(errors="replace")[log_before:], "a request of the student's " \
        "reached the hub or the course service"
    # the page itself works under its policy: a score typed into a test cell's box is saved
    box = page.locator("input.score").first
    box.wait_for(timeout=60_000)
    grade_id = box.get_attribute("id")
    box.fill("0")
    box.press("Tab")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        grade = next(g for g in fg.get(f"/grades?submission_id={sub_id}") if g["name"] == grade_id)
        if grade["manual_score"] == 0:
            break
        page.wait_for_timeout(500)
    assert grade["manual_score"] == 0, grade
    fg.put(f"/grade/{grade['id']}", {"manual_score": None})

    _the_policy_alone_stops_injected_code(page, url, hub, mark, requests, console)
    shot(page, "10-manual-grading-injected.png")
    ctx.close()


def _instructor_releases_in_the_formgrader(browser, hub, pages):
    """The instructor: hub home page (not a server of their own), the formgrader in a new tab, where they
    release the assignment. Returns (the formgrader's page, the assignment's row)."""
    ictx, ip = log_in(browser, hub, INSTRUCTOR)
    pages["instructor-home"] = ip
    ip.wait_for_url("**/hub/home", timeout=LONG_MS)
    link = ip.locator(f"#formgrader-{deploy.COURSE_ID}")
    assert link.get_attribute("target") == "_blank"
    shot(ip, "01-instructor-home.png")
    with ictx.expect_page() as opened:
        link.click()
    fg = opened.value
    pages["formgrader"] = fg
    fg.set_default_timeout(60_000)
    row = fg.locator(f"table tr:has(td.name a:text-is('{A}'))")
    row.wait_for(timeout=LONG_MS)
    assert re.search(rf"/services/{deploy.COURSE_ID}/formgrader", fg.url), fg.url
    assert row.locator("td.status").inner_text().strip() == "draft"
    row.locator("td.release a").click()
    formgrader_modal(fg, "release")
    shot(fg, "02-formgrader-released.png")
    close_modal(fg)
    assert row.locator("td.status").inner_text().strip() == "released"
    return fg, row


def _student_fetches_from_the_assignment_list(browser, hub, pages):
    """The student: OS password, straight into their own JupyterLab (a server running as them); the
    Nbgrader menu shows only the assignment list, where they fetch. Returns (their page, the fetched row)."""
    sctx, sp = log_in(browser, hub, STUDENT)
    pages["student"] = sp
    sp.wait_for_url(f"**/user/{STUDENT}/lab**", timeout=LONG_MS)
    sp.wait_for_selector(".jp-LabShell", timeout=LONG_MS)
    pid = hub.api().user(STUDENT)["servers"][""]["state"]["pid"]
    assert Path(f"/proc/{pid}").stat().st_uid == deploy.uid_of(STUDENT)
    news = sp.get_by_role("button", name="No", exact=True)
    try:
        news.click(timeout=10_000)  # JupyterLab's "Jupyter news?" prompt on a first start
    except Exception:
        pass
    sp.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    items = [t.strip() for t in sp.locator(".lm-Menu-content .lm-Menu-item:not(.lm-mod-hidden) .lm-Menu-itemLabel")
             .all_inner_texts() if t.strip()]
    assert items == ["Assignment List"], f"a student's Nbgrader menu shows {items}"
    sp.get_by_role("menuitem", name="Assignment List").click()
    released = sp.locator(f"#released_assignments_list .list_item:has-text('{A}')")
    released.wait_for(timeout=LONG_MS)
    shot(sp, "03-student-assignment-list.png")
    released.get_by_role("button", name="Fetch").click()
    fetched = sp.locator(f"#fetched_assignments_list .list_item:has(a.assignment-notebooks-link:has-text('{A}'))")
    fetched.wait_for(timeout=LONG_MS)
    shot(sp, "04-student-fetched.png")
    return sp, fetched


def _student_runs_the_first_cell_and_saves(sp, fetched):
    """Open the notebook from the list and run its first code cell (the course library's imports), then
    save. Returns (the saved notebook, the cell's run time in seconds)."""
    fetched.locator("a.assignment-notebooks-link").click()
    sp.locator(f"#nbgrader-{deploy.COURSE_ID}-{A} a:text-is('{NB}')").click()
    nb_panel = sp.locator(".jp-NotebookPanel:visible")
    nb_panel.wait_for(timeout=LONG_MS)
    first_code = nb_panel.locator(".jp-CodeCell").first
    first_code.wait_for(timeout=LONG_MS)
    # A cell run before the kernel is connected is dropped: wait for JupyterLab's "Idle".
    expect(sp.locator("#jp-main-statusbar")).to_contain_text("| Idle", timeout=LONG_MS)
    first_code.locator(".jp-InputArea-editor").click()
    t0 = time.monotonic()
    sp.keyboard.press("Shift+Enter")
    expect(first_code.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=LONG_MS)
    ran_s = time.monotonic() - t0
    errors = first_code.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], "
                                ".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, f"the first cell failed in the student's kernel: {errors.first.inner_text()[:1000]}"
    sp.keyboard.press("Control+s")
    sp.wait_for_function("() => !document.querySelector('.jp-mod-current.jp-mod-dirty')", timeout=60_000)
    first_code.scroll_into_view_if_needed()
    shot(sp, "05-student-ran-first-cell.png")
    saved = json.loads((deploy.home_of(STUDENT) / A / f"{NB}.ipynb").read_text())
    first_saved = next(c for c in saved["cells"] if c["cell_type"] == "code")
    assert first_saved.get("execution_count") == 1, "the run cell was not saved"
    return saved, ran_s


def _hostile_submission_graded(course_hub, mark: str):
    """The hostile student submits the cells of hostile_cells(mark); the instructor collects and grades
    (course_tool.py autograde). Returns (the instructor's formgrader, the notebook's submission id)."""
    cfg = course_hub.cfg
    users, fg = course_hub.open_class([HOSTILE], A)
    student = users[HOSTILE]
    nb = student.get_notebook(f"{A}/{NB}.ipynb")
    nb["cells"][1:1] = hostile_cells(mark)
    student.put_notebook(f"{A}/{NB}.ipynb", nb)
    student.action("submit", deploy.COURSE_ID, A)
    fg.post(f"/assignment/{A}/collect")
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    proc = deploy.run_as(INSTRUCTOR, [python, "course_tool.py", "autograde", A, "--workers", "2"], cfg,
                         cwd=cfg.course_dir, timeout=900, check=False)
    (ARTIFACTS / "hostile-autograde.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    graded = json.loads((cfg.course_dir / "autograded" / HOSTILE / A / f"{NB}.ipynb").read_text())
    shown = json.dumps(graded)
    assert f"html-{mark}" in shown and "application/javascript" in shown, "the hostile outputs were not produced"
    sub_id = next(n["id"] for n in fg.get(f"/submitted_notebooks/{A}/{NB}") if n["student"] == HOSTILE)
    return fg, sub_id


def _the_policy_alone_stops_injected_code(page, url: str, hub, mark: str, requests: list, console: list) -> None:
    """The policy on its own: the same page with a script and a handler put back into it (as if the
    sanitiser had missed them) runs neither; the browser reports the policy's refusals."""
    def inject(route):
        response = route.fetch()
        body = response.text().replace(
            '<div class="container" id="notebook-container">',
            f'<div class="container" id="notebook-container"><script>window.csp_{mark} = 1</script>'
            f'<img src="data:," onerror="window.csp2_{mark} = 1"><a id="jsl" href="javascript:window.csp3_{mark}=1">j</a>'
            f'<img src="/services/{deploy.COURSE_ID}/formgrader/api/csp-{mark}">', 1)
        assert f"csp_{mark}" in body, "the injection point is gone"
        route.fulfill(response=response, body=body)
    page.route(url, inject)
    console.clear()
    requests.clear()
    failed = {}
    page.on("requestfailed", lambda r: failed.__setitem__(r.url, r.failure))
    log_before = len(hub.hub.log_path.read_text(errors="replace"))
    page.goto(url)
    page.wait_for_selector("#notebook-container", timeout=LONG_MS)
    page.locator("#jsl").click()
    page.wait_for_timeout(1500)
    for g in ("csp_", "csp2_", "csp3_"):
        assert page.evaluate(f"() => window.{g}{mark}") is None, f"{g}: the policy let an injected script run"
    # the browser lists the image's request and fails it itself (blocked by the policy): it never left
    blocked = [u for u in requests if f"csp-{mark}" in u]
    assert all("csp" in (failed.get(u) or "").lower() for u in blocked), (blocked, failed)
    assert f"csp-{mark}" not in hub.hub.log_path.read_text(errors="replace")[log_before:], \
        "the policy let an injected image reach the service"
    assert any("Content Security Policy" in m for m in console), console[-5:]
    assert page.evaluate("() => typeof Backbone") == "object", "the formgrader's own scripts no longer run"
