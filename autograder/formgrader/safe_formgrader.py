"""The formgrader with student content made inert: nothing a submission holds runs in a grader's browser.

nbgrader's formgrader (its Manual Grading page, /formgrader/submissions/<id>/) renders a student's
autograded notebook with nbconvert's HTML exporter: markdown with raw HTML, text/html and SVG outputs,
JavaScript outputs and widget state go into the page as they are, on the origin of the course service,
where a script acts as the grader (it can call the formgrader's API and the service's Jupyter API:
files, terminals, kernels). This module is the course's formgrader: a Jupyter server extension that
loads nbgrader's and replaces the two things that render student content:

1. The notebook is rebuilt before it is rendered (`InertNotebook`): an allow-list of cell types,
   fields and output types. text/html outputs and rendered markdown (cells and text/markdown outputs)
   go through an allow-list HTML sanitiser (nh3, the ammonia library: no scripts, no event handlers,
   no style sheets, no forms, no frames, no SVG; links only to http(s), mailto and #anchors;
   images only as data: URLs of image types, which a browser shows without running anything); SVG
   outputs become such images; JavaScript, widget views, widget state and every other type are
   dropped with a note the grader sees; attachments are kept only as images; identifiers that the
   template writes into attributes (cell ids, grade ids) must be plain names.
2. The page carries a Content-Security-Policy (as an HTTP header and as the first element of its head):
   scripts run only with the nonce of this one response (the formgrader's own, which the course's
   template gives it; no inline handlers, no javascript: URLs), images only from data: URLs, no
   frames, objects, forms or base URL. A script the sanitiser missed still cannot run, and an image
   cannot make the grader's browser request anything of the service.

Use: `jpserver_extensions = {"autograder.formgrader.safe_formgrader": True, "nbgrader.server_extensions.formgrader": False}`
(hub/deploy/configs.py writes this for the course service). The extension loads nbgrader's formgrader itself,
so a formgrader without these protections never starts in its place: if this module fails to load,
there is no formgrader at all.
"""

from __future__ import annotations

import base64
import binascii
import html
import math
import re
import secrets

import nh3
from jinja2 import DictLoader, pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES

SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat's pattern for cell ids
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")
B64 = re.compile(r"[A-Za-z0-9+/=\s]*")
DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=]+")
MAX_TEXT = 1_000_000  # characters of one output or cell kept for the page (the grader's own caps are lower)

# ----------------------------------------------------------------------------- HTML

TAGS = {"a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details",
        "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img",
        "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub",
        "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var"}
ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title", "width", "height"},
              "td": {"colspan", "rowspan", "style"}, "th": {"colspan", "rowspan", "style", "scope"},
              "ol": {"start"}, "abbr": {"title"}}
# class names the page's style sheets give a meaning to in rendered markdown: pygments' token classes
# (highlighted code blocks) and its wrapper; nothing of the formgrader's own (navbar, modal, btn ...)
CLASSES = {"span": {c for c in STANDARD_TYPES.values() if c}, "div": {"highlight"}}


def _attribute(tag: str, attr: str, value: str) -> str | None:
    """What survives of a URL-carrying or sized attribute (nh3's attribute_filter)."""
    if attr == "href":
        v = value.strip()
        if re.match(r"(?i)(https?://|mailto:)", v) or re.fullmatch(r"#[A-Za-z0-9_.:-]*", v):
            return v
        return None  # relative links reach the service as the grader; javascript:, data: ... never
    if attr == "src":
        return value if tag == "img" and DATA_IMAGE.fullmatch(value.strip()) else None
    if attr in ("width", "height", "colspan", "rowspan", "start"):
        return value if re.fullmatch(r"\d{1,5}%?", value.strip()) else None
    return value


def clean_html(fragment: str) -> str:
    """Student HTML as inert HTML (allow-list; see the module docstring)."""
    return nh3.clean(
        str(fragment)[:MAX_TEXT], tags=TAGS, clean_content_tags={"script", "style", "template", "noscript"},
        attributes=ATTRIBUTES, attribute_filter=_attribute, strip_comments=True,
        link_rel="noopener noreferrer nofollow",
        url_schemes={"http", "https", "mailto", "data"}, allowed_classes=CLASSES,
        filter_style_properties={"text-align"})


# ----------------------------------------------------------------------------- the notebook

def _text(value) -> str:
    if isinstance(value, list):
        value = "".join(str(v) for v in value)
    return str(value if value is not None else "")[:MAX_TEXT]


def _b64(value) -> str | None:
    """Base64 image data as written in a notebook, or None when it is anything else."""
    s = _text(value)
    if not B64.fullmatch(s):
        return None
    s = re.sub(r"\s+", "", s)
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return None
    return s


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _note(what: str) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/plain": f"[{what}: not shown in the formgrader, which shows no active content]"}}


def inert_output(out) -> dict | None:
    kind = out.get("output_type")
    if kind == "stream":
        return {"output_type": "stream", "name": "stderr" if out.get("name") == "stderr" else "stdout",
                "text": _text(out.get("text"))}
    if kind == "error":
        tb = out.get("traceback") if isinstance(out.get("traceback"), list) else []
        return {"output_type": "error", "ename": _text(out.get("ename"))[:1000], "evalue": _text(out.get("evalue")),
                "traceback": [_text(t) for t in tb[:1000]]}
    if kind not in ("execute_result", "display_data"):
        return _note(f"an output of type {str(kind)[:40]!r}")
    data = out.get("data") if isinstance(out.get("data"), dict) else {}
    meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
    safe, dropped, safe_meta = {}, [], {}
    for mime, value in data.items():
        if mime == "text/plain":
            safe[mime] = _text(value)
        elif mime == "text/html":
            safe[mime] = clean_html(_text(value))
        elif mime == "text/markdown":
            safe[mime] = _text(value)  # rendered by the exporter's markdown2html, which sanitises
        elif mime == "text/latex":
            safe.setdefault("text/plain", _text(value))
        elif mime == "image/svg+xml":  # shown as an image: an SVG in <img> runs no script, loads nothing
            encoded = base64.b64encode(_text(value).encode()).decode()
            safe["text/html"] = f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG output">'
        elif mime in IMAGE_TYPES:
            b = _b64(value)
            if b is None:
                dropped.append(f"{mime} that is not base64")
                continue
            safe[mime] = b
            m = meta.get(mime) if isinstance(meta.get(mime), dict) else {}
            sizes = {k: int(m[k]) for k in ("width", "height") if _number(m.get(k)) is not None and 0 < m[k] < 10000}
            if sizes:
                safe_meta[mime] = sizes
        else:
            dropped.append(str(mime)[:80])
    if not safe:
        return _note("an output of type " + ", ".join(dropped or ["(none)"]))
    if dropped:
        safe.setdefault("text/plain", "")
        safe["text/plain"] += f"\n[also {', '.join(dropped)}: not shown in the formgrader]"
    result = {"output_type": kind, "metadata": safe_meta, "data": safe}
    if kind == "execute_result":
        result["execution_count"] = out.get("execution_count") if isinstance(out.get("execution_count"), int) else None
    return result


def inert_nbgrader(meta) -> dict | None:
    """The nbgrader fields the formgrader's template reads, as the types it expects; None when the grade
    id is not a plain name (the template writes it into attributes)."""
    if not isinstance(meta, dict) or not SAFE_NAME.fullmatch(str(meta.get("grade_id", ""))):
        return None
    out = {k: bool(meta.get(k)) for k in ("grade", "solution", "locked", "task")}
    out["grade_id"] = meta["grade_id"]
    if _number(meta.get("points")) is not None:
        out["points"] = float(meta["points"])
    if isinstance(meta.get("schema_version"), int):
        out["schema_version"] = meta["schema_version"]
    return out


def inert_cell(cell, index: int) -> dict:
    kind = cell.get("cell_type")
    cid = cell.get("id")
    cid = cid if isinstance(cid, str) and CELL_ID.fullmatch(cid) else f"cell-{index}"
    meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    nbg = inert_nbgrader(meta.get("nbgrader"))
    safe = {"id": cid, "metadata": {"nbgrader": nbg} if nbg else {}, "source": _text(cell.get("source"))}
    if kind == "code":
        outs = cell.get("outputs") if isinstance(cell.get("outputs"), list) else []
        count = cell.get("execution_count")
        safe.update(cell_type="code", execution_count=count if isinstance(count, int) else None,
                    outputs=[o for o in (inert_output(o) for o in outs[:500] if isinstance(o, dict)) if o])
    elif kind == "markdown":
        safe["cell_type"] = "markdown"
        attachments = cell.get("attachments") if isinstance(cell.get("attachments"), dict) else {}
        kept = {}
        for name, bundle in attachments.items():
            if not (isinstance(bundle, dict) and SAFE_NAME.fullmatch(str(name))):
                continue
            for mime, value in bundle.items():
                b = _b64(value) if mime in (*IMAGE_TYPES, "image/svg+xml") else None
                if b is not None:
                    kept[name] = {mime: b}
                    break
        if kept:
            safe["attachments"] = kept
        for name in attachments:  # a dropped attachment's image shows as a broken image, not as the cell's failure
            if name not in kept:
                safe["source"] = safe["source"].replace(f"attachment:{name}", "dropped-attachment:")
    else:  # raw cells (and unknown types) as text: the template would write a raw cell's source as it is
        safe.update(cell_type="markdown", source="```\n" + safe["source"].replace("```", "`\u200b``") + "\n```")
    return safe


class InertNotebook(Preprocessor):
    """Rebuilds the notebook from an allow-list before the formgrader renders it (module docstring)."""

    def preprocess(self, nb, resources):
        import nbformat

        meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
        lang = meta.get("language_info") if isinstance(meta.get("language_info"), dict) else {}
        name = str(lang.get("name", "python"))
        safe_meta = {"language_info": {"name": name if SAFE_NAME.fullmatch(name) else "python"}}
        ks = meta.get("kernelspec") if isinstance(meta.get("kernelspec"), dict) else {}
        if SAFE_NAME.fullmatch(str(ks.get("name", ""))):
            safe_meta["kernelspec"] = {"name": ks["name"], "display_name": html.escape(_text(ks.get("display_name"))[:100]),
                                       "language": safe_meta["language_info"]["name"]}
        cells = nb.get("cells") if isinstance(nb.get("cells"), list) else []
        rebuilt = {"nbformat": 4, "nbformat_minor": 5, "metadata": safe_meta,
                   "cells": [inert_cell(c, i) for i, c in enumerate(cells[:5000]) if isinstance(c, dict)]}
        return nbformat.from_dict(rebuilt), resources


# ----------------------------------------------------------------------------- the page

def policy(nonce: str, for_meta: bool = False) -> str:
    """The Manual Grading page's Content-Security-Policy."""
    parts = ["default-src 'none'", f"script-src 'nonce-{nonce}'", "style-src 'self' 'unsafe-inline'",
             "img-src data:", "font-src 'self' data:", "connect-src 'self'", "base-uri 'none'", "form-action 'none'",
             "object-src 'none'"]
    if not for_meta:  # not allowed in a <meta> policy
        parts.append("frame-ancestors 'none'")
    return "; ".join(parts)


# The formgrader's page macros (nbgrader's formgrade_macros.html.j2 has the same two macros), written for
# a page under the policy above: every script carries the response's nonce, values reach scripts as
# JSON, the name toggles are wired by a script instead of onclick attributes, every value is escaped.
MACROS = r"""
{% macro header(resources) %}
{%- set nonce = resources.csp_nonce | e -%}
{%- set static = (resources.base_url ~ '/formgrader/static') | e -%}
<meta charset="utf-8" />
<meta http-equiv="Content-Security-Policy" content="{{ resources.csp_meta | e }}">
<title>{{ resources.notebook_id | e }}</title>
{%- for js in ['node_modules/jquery/dist/jquery.min.js', 'node_modules/jquery-color/dist/jquery.color.min.js',
               'node_modules/underscore/underscore-min.js', 'node_modules/backbone/backbone-min.js',
               'node_modules/bootstrap/dist/js/bootstrap.min.js', 'node_modules/autosize/dist/autosize.min.js'] %}
<script nonce="{{ nonce }}" src="{{ static }}/{{ js }}"></script>
{%- endfor %}
<script nonce="{{ nonce }}">
var submission_id = {{ resources.submission_id | tojson }};
var notebook_id = {{ resources.notebook_id | tojson }};
var assignment_id = {{ resources.assignment_id | tojson }};
var base_url = {{ (resources.base_url ~ '/formgrader') | tojson }};
</script>
{%- for js in ['js/backbone_xsrf.js', 'js/formgrade_keyboardmanager.js', 'js/formgrade_models.js',
               'js/formgrade.js', 'js/utils.js'] %}
<script nonce="{{ nonce }}" src="{{ static }}/{{ js }}"></script>
{%- endfor %}
<script nonce="{{ nonce }}">
function toggle_name(on) {
  $(".name-shown").tooltip('hide');
  $(".name-hidden").tooltip('hide');
  if (on) { $(".name-shown").show(); $(".name-hidden").hide(); }
  else { $(".name-hidden").show(); $(".name-shown").hide(); }
}
$(document).ready(function() {
  $("[data-link]").each(function() {
    $(this).map(linkTo("notebook", $(this).data("link"))).removeAttr("data-link");
  });
  $("span.glyphicon.name-hidden").on("click", function() { toggle_name(true); });
  $("span.glyphicon.name-shown").on("click", function() { toggle_name(false); });
});
</script>
<link rel="stylesheet" href="{{ static }}/node_modules/bootstrap/dist/css/bootstrap.min.css" />
{% endmacro %}

{% macro nav(resources) %}
{%- set fg = (resources.base_url ~ '/formgrader') | e -%}
  <nav class="navbar navbar-default navbar-fixed-top" role="navigation">
    <div class="container">
      <div class="col-md-2">
        <ul class="nav navbar-nav navbar-left">
          <li class="previous">
            <a data-toggle="tooltip" data-trigger="hover" data-placement="right" title="{{ resources.index | int }} remaining"
               href="{{ fg }}/submissions/{{ resources.submission_id | e }}/prev">&larr; Prev</a>
          </li>
        </ul>
      </div>
      <div class="col-md-8">
        <ul class="nav text-center">
          <ul class="breadcrumb">
            <li><a href="{{ fg }}/gradebook">Manual Grading</a></li>
            <li><a href="{{ fg }}/gradebook/{{ resources.assignment_id | e }}">{{ resources.assignment_id | e }}</a></li>
            <li><a href="{{ fg }}/gradebook/{{ resources.assignment_id | e }}/{{ resources.notebook_id | e }}">{{ resources.notebook_id | e }}</a></li>
            <li class="active live-notebook">
              <a class="name-hidden" data-toggle="tooltip" data-placement="bottom" title="Open live notebook"
                 data-link="{{ resources.notebook_path | e }}">Submission #{{ resources.index + 1 }}</a>
              <a class="name-shown" data-toggle="tooltip" data-placement="bottom" title="Open live notebook"
                 data-link="{{ resources.notebook_path | e }}">
                {%- if resources.last_name and resources.first_name -%}
                {{ resources.last_name | e }}, {{ resources.first_name | e }}
                {%- else -%}
                {{ resources.student | e }}
                {%- endif -%}
              </a>
              <span class="glyphicon glyphicon-eye-open name-hidden" aria-hidden="true"></span>
              <span class="glyphicon glyphicon-eye-close name-shown" aria-hidden="true"></span>
            </li>
          </ul>
        </ul>
      </div>
      <div class="col-md-2">
        <ul class="nav navbar-nav navbar-right">
          <li class="next">
            <a class="tabbable" data-trigger="hover" data-toggle="tooltip" data-placement="left"
               title="{{ resources.total - (resources.index + 1) }} remaining"
               href="{{ fg }}/submissions/{{ resources.submission_id | e }}/next">Next &rarr;</a>
          </li>
        </ul>
      </div>
    </div>
  </nav>
  <script nonce="{{ resources.csp_nonce | e }}">
  $('span.glyphicon.name-hidden').tooltip({title: "Show student name", placement: "bottom", trigger: "hover"});
  $('span.glyphicon.name-shown').tooltip({title: "Hide student name", placement: "bottom", trigger: "hover"});
  </script>
{% endmacro %}
"""
# No MathJax: nbconvert's loads it from a CDN into the page; the graders read TeX as written.
OVERRIDES = {"formgrade_macros.html.j2": MACROS, "mathjax.html.j2": "{% macro mathjax(url=None) %}{% endmacro %}"}


class InertFormgradeExporter(HTMLExporter):
    """nbconvert's HTML exporter as the formgrader configures it (template "formgrade"), with the course's
    macros, the notebook rebuilt by InertNotebook and every piece of rendered markdown sanitised."""

    def __init__(self, **kw):
        super().__init__(extra_loaders=[DictLoader(OVERRIDES)], **kw)
        # nbconvert's template then cleans what it inserts (with clean_html, the course's sanitiser below)
        # and leaves out JavaScript outputs and widget state (InertNotebook drops them before)
        self.sanitize_html = True
        self.embed_images = False   # never: a markdown image path would be read from the service's disk

    def from_notebook_node(self, nb, resources=None, **kw):
        # first of all: nbconvert's own preprocessors (and its validation after each) then see only the
        # rebuilt notebook
        nb, resources = InertNotebook().preprocess(nb, resources)
        return super().from_notebook_node(nb, resources, **kw)

    def _init_resources(self, resources):
        resources = super()._init_resources(resources)
        resources.setdefault("csp_nonce", secrets.token_urlsafe(18))
        resources["csp_meta"] = policy(resources["csp_nonce"], for_meta=True)
        return resources

    @pass_context
    def markdown2html(self, context, source):
        try:
            return clean_html(HTMLExporter.markdown2html(self, context, source))
        except Exception as e:  # e.g. an attachment the cell names but does not hold (or that was dropped):
            # the grader still sees the cell, as text
            return (f"<p><em>[this markdown could not be rendered ({html.escape(type(e).__name__)}); its text:]"
                    f"</em></p><pre>{html.escape(_text(source))}</pre>")

    def default_filters(self):
        for name, f in super().default_filters():
            if name == "markdown2html":
                yield name, self.markdown2html
            elif name == "clean_html":
                yield name, clean_html
            elif name == "strip_files_prefix":  # it would turn a relative "files/javascript:..." into a URL
                yield name, lambda text: text
            else:
                yield name, f


# ----------------------------------------------------------------------------- the server extension

def _handlers_of(router):
    for rule in getattr(router, "rules", []):
        yield rule
        yield from _handlers_of(rule.target)


def _load_jupyter_server_extension(serverapp):
    """Load nbgrader's formgrader, then make its Manual Grading page the inert one."""
    from nbgrader.server_extensions.formgrader import formgrader as fg
    from nbgrader.server_extensions.formgrader import handlers

    class InertSubmissionHandler(handlers.SubmissionHandler):
        @property
        def csp_nonce(self) -> str:
            if not hasattr(self, "_csp_nonce"):
                self._csp_nonce = secrets.token_urlsafe(18)
            return self._csp_nonce

        @property
        def content_security_policy(self) -> str:
            return policy(self.csp_nonce)

        @property
        def exporter(self):
            handler = self

            class WithNonce:
                def from_filename(self, filename, resources=None, **kw):
                    resources = dict(resources or {}, csp_nonce=handler.csp_nonce)
                    return handler.settings["llmrl_inert_exporter"].from_filename(filename, resources=resources, **kw)
            return WithNonce()

    webapp = serverapp.web_app
    fg.load_jupyter_server_extension(serverapp)
    formgrader = webapp.settings["nbgrader_formgrader"]
    exporter = InertFormgradeExporter(config=formgrader.config, extra_template_basedirs=[handlers.template_path],
                                      template_name="formgrade")
    webapp.settings["llmrl_inert_exporter"] = exporter
    webapp.settings["nbgrader_exporter"] = exporter  # anything else of the formgrader that renders
    replaced = 0
    for rule in _handlers_of(webapp.default_router):
        if rule.target is handlers.SubmissionHandler:
            rule.target = InertSubmissionHandler
            replaced += 1
    if not replaced:
        raise RuntimeError("safe_formgrader: nbgrader's Manual Grading handler was not found; the formgrader would "
                           "render student content unsanitised")
    serverapp.log.info("safe_formgrader: the Manual Grading page renders student content inert (%d route(s))", replaced)


def _jupyter_server_extension_points():
    return [{"module": "autograder.formgrader.safe_formgrader"}]


def render(path, resources: dict | None = None) -> str:
    """The Manual Grading page's notebook part for a notebook file (what the tests look at)."""
    from nbgrader.server_extensions.formgrader import handlers

    exporter = InertFormgradeExporter(extra_template_basedirs=[handlers.template_path], template_name="formgrade")
    base = {"assignment_id": "a", "notebook_id": "nb", "submission_id": "s", "index": 0, "total": 1,
            "base_url": "/services/llmrl", "student": "student", "last_name": "", "first_name": "",
            "notebook_path": "autograded/student/a/nb.ipynb"}
    base.update(resources or {})
    return exporter.from_filename(str(path), resources=base)[0]


if __name__ == "__main__":  # python -m autograder.formgrader.safe_formgrader NOTEBOOK: the page on stdout
    import sys

    print(render(sys.argv[1]))
