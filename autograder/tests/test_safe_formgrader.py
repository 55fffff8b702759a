"""The formgrader's Manual Grading page (autograder/formgrader/safe_formgrader.py) rendered from hostile notebooks.

The page is parsed (BeautifulSoup, Python's HTML parser) and every element that could run code or make
the grader's browser request something is checked: scripts only the formgrader's own (with the
response's nonce, from its static folder), no event-handler attributes, no javascript: or relative
URLs, images only as data: URLs, no frames, objects, forms, SVG or style sheets from the notebook. The
same page in a real browser, on the hub, is hub/tests/test_hub_browser.py.
"""

from __future__ import annotations

import base64
import re

import nbformat
import pytest

from autograder.formgrader import safe_formgrader

pytestmark = pytest.mark.fast  # make test-fast runs this file

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")).decode()
MARK = "planted-by-the-student"
SERVICE_API = "/services/llmrl/api/contents/" + MARK


def hostile_notebook() -> nbformat.NotebookNode:
    """Every place of a notebook where a student can put markup, each with a script, a handler or a
    request to the course service's API."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m": {
        "model_name": "HTMLModel", "state": {"value": f"<img src=x onerror=\"fetch('{SERVICE_API}')\">"}}}}}
    nb.metadata["title"] = "</title><script>window.pwned='title'</script>"
    md = nbformat.v4.new_markdown_cell(
        f"# Answer\n\nvisible words {MARK}\n\n<script>window.pwned='md'</script>\n\n"
        "<img src=x onerror=\"window.pwned='onerror'\">\n\n"
        "<a href=\"javascript:window.pwned='js-link'\">click</a> [also](javascript:window.pwned=1)\n\n"
        f"<a href=\"files/javascript:window.pwned='files-prefix'\">f</a> <a href=\"{SERVICE_API}\">api</a>\n\n"
        "<svg onload=\"window.pwned='svg'\"><script>window.pwned='svg-script'</script></svg>\n\n"
        f"<iframe src=\"{SERVICE_API}\"></iframe><object data=\"{SERVICE_API}\"></object>"
        f"<form action=\"{SERVICE_API}\" method=post><button>go</button></form>\n\n"
        f"<style>body {{ background: url({SERVICE_API}) }}</style><p style=\"background:url({SERVICE_API})\">s</p>\n\n"
        f"<base href=\"{SERVICE_API}/\"><meta http-equiv=refresh content=\"0;url={SERVICE_API}\">\n\n"
        "![pic](attachment:pic.png) ![page](attachment:page.html) ![svg](attachment:s.svg)\n\n"
        "<details><summary>fine</summary><b>kept</b></details>")
    md.attachments = {"pic.png": {"image/png": PNG},
                      "page.html": {"text/html": base64.b64encode(b"<script>window.pwned=1</script>").decode()},
                      "s.svg": {"image/svg+xml": base64.b64encode(b"<svg><script>window.pwned=1</script></svg>").decode()}}
    code = nbformat.v4.new_code_cell("answer = 42", metadata={
        "nbgrader": {"grade": True, "solution": True, "grade_id": "task1", "points": 2, "locked": False},
        "tags": ["\"><script>window.pwned='tag'</script>"]})
    code.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": f"<b>html {MARK}</b><script>window.pwned='html'</script><img src=\"{SERVICE_API}\">"
                         f"<img src=x onerror=\"window.pwned='img'\"><video src=\"{SERVICE_API}\"></video>",
            "text/plain": "plain"}),
        nbformat.v4.new_output("display_data", data={
            "image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"fetch('{SERVICE_API}')\">"
                             "<script>window.pwned='svg-output'</script><circle r='5'/></svg>"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "window.pwned='js-output'"}),
        nbformat.v4.new_output("display_data", data={"image/png": '" onerror="window.pwned=\'png\''}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG},
                               metadata={"image/png": {"width": "1 onerror=window.pwned=1"}}),
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "m"}}),
        nbformat.v4.new_output("display_data", data={"text/markdown": "<script>window.pwned='markdown-output'</script>"}),
        nbformat.v4.new_output("execute_result", data={"text/latex": "<script>window.pwned='latex'</script>"},
                               execution_count=1),
        nbformat.v4.new_output("stream", name="stdout", text="<script>window.pwned='stream'</script>"),
        nbformat.v4.new_output("error", ename="E", evalue="<script>x</script>",
                               traceback=["<img src=x onerror=window.pwned=1>"]),
    ]
    fake = nbformat.v4.new_code_cell("x", metadata={"nbgrader": {
        "grade": True, "grade_id": "a\" onmouseover=\"window.pwned='grade-id'", "points": 1}})
    raw = nbformat.v4.new_raw_cell("<script>window.pwned='raw'</script>", metadata={"raw_mimetype": "text/html"})
    missing = nbformat.v4.new_markdown_cell(f"![gone](attachment:none.png) <b>{MARK} 2</b><script>window.pwned=2</script>")
    nb.cells = [md, code, fake, raw, missing]
    nb.cells[2]["id"] = "x\" onmouseover=\"window.pwned='cell-id'"
    return nb


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("fg") / "nb.ipynb"
    path.write_text(nbformat.writes(hostile_notebook(), version=4))  # written as a student would, unvalidated
    text = safe_formgrader.render(path, {"csp_nonce": "N0NCE"})
    from bs4 import BeautifulSoup
    return text, BeautifulSoup(text, "html.parser")


def test_only_the_formgraders_own_scripts_are_on_the_page(page):
    text, doc = page
    static = "/services/llmrl/formgrader/static/"
    for s in doc.find_all("script"):
        assert s.get("nonce") == "N0NCE", f"a script without the response's nonce: {s.attrs} {s.text!r:.200}"
        if s.get("src"):
            assert s.get("src").startswith(static), s.get("src")
        else:  # the two inline scripts of the course's template
            assert "pwned" not in (s.text or "") and ("submission_id" in s.text or "toggle_name" in s.text
                                                       or "tooltip" in s.text), s.text
    assert "pwned" not in "".join(s.text or "" for s in doc.find_all("script"))
    first = doc.find("head").find_all("meta")[1]
    assert first.get("http-equiv") == "Content-Security-Policy" and "script-src 'nonce-N0NCE'" in first.get("content")
    assert "img-src data:" in first.get("content") and "default-src 'none'" in first.get("content")


def test_nothing_the_student_wrote_can_run_or_request(page):
    text, doc = page
    for el in doc.find_all(True):
        for name, value in el.attrs.items():
            value = " ".join(value) if isinstance(value, list) else value
            assert not name.lower().startswith("on"), f"<{el.tag} {name}={value!r}>"
            if name in ("href", "src", "action", "data", "formaction", "poster"):
                v = value.strip()
                ok = (v.startswith("/services/llmrl/formgrader/") or v.startswith("#") or
                      re.fullmatch(r"data:image/(png|svg\+xml);base64,[A-Za-z0-9+/=]+", v) and el.name == "img")
                assert ok, f"<{el.name} {name}={value!r}>: a request the student chose"
        assert el.name not in ("iframe", "object", "embed", "form", "svg", "base", "video", "audio", "template"), el.name
        if el.name == "meta":
            assert el.get("http-equiv", "").lower() != "refresh"
    body = doc.find("body")
    assert not body.find_all("style") and not body.find_all("link"), "style sheets from the notebook"
    assert all("url(" not in (el.get("style") or "") for el in doc.find_all(True))
    assert "pwned" not in "".join(str(v) for el in doc.find_all(True) for v in el.attrs.values())


def test_the_grader_still_sees_the_work_and_grades_it(page):
    text, doc = page
    words = doc.find("body").get_text()
    assert f"visible words {MARK}" in words and f"html {MARK}" in words and "kept" in words
    # the markdown is rendered (sanitised HTML, not text), attachments that are images included
    assert doc.find("h1").get_text().startswith("Answer") and doc.find("details").find("b").get_text() == "kept"
    assert any(i.get("alt") == "pic" and i.get("src", "").startswith("data:image/png;base64,") for i in doc.find_all("img"))
    # a cell that names an attachment it does not hold is shown as its text, not as a page that fails
    assert f"<b>{MARK} 2</b><script>window.pwned=2</script>" in words
    assert "window.pwned='stream'" in words, "a printed string is shown as text"
    assert "[an output of type application/javascript: not shown in the formgrader" in words
    assert "application/vnd.jupyter.widget-view+json" in words
    # the real grade cell keeps its score box; the one with a forged id is shown as a plain cell
    inputs = {i.get("id") for i in doc.find_all("input")}
    assert "task1" in inputs and len([i for i in inputs if i and "pwned" in i]) == 0, inputs
    imgs = [i.get("src") for i in doc.find_all("img") if i.get("src")]
    assert any(s.startswith("data:image/png;base64,") for s in imgs), "the PNG output and attachment are shown"
    assert any(s.startswith("data:image/svg+xml;base64,") for s in imgs), "the SVG output is shown as an image"


@pytest.mark.parametrize("fragment, expected", [
    ("<a href='https://example.org/x'>x</a>", '<a href="https://example.org/x" rel="noopener noreferrer nofollow">x</a>'),
    ("<a href='/services/llmrl/api/contents'>x</a>", '<a rel="noopener noreferrer nofollow">x</a>'),
    ("<a href='JaVaScRiPt:alert(1)'>x</a>", '<a rel="noopener noreferrer nofollow">x</a>'),
    ("<img src='data:text/html;base64,PGI+'>", "<img>"),
    ("<img src='//evil.example/x.png'>", "<img>"),
    ("<p onclick='x()' id='grade_task1' class='modal'>t</p>", "<p>t</p>"),
    ("<math><mtext><script>x</script></mtext></math>", ""),
])
def test_the_sanitiser_keeps_text_and_drops_active_markup(fragment, expected):
    assert safe_formgrader.clean_html(fragment) == expected
