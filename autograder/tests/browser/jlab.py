"""Drive a real JupyterLab in a real browser (Debian's chromium through Playwright).

Used by test_jupyterlab.py. Three parts:

* :class:`LabServer` starts ``jupyter lab`` from this repository's ``.venv`` on 127.0.0.1, a free port
  and a random token, in a throw-away copy of the course directory (``source/``, ``release/`` and the
  nbgrader config), so that running, editing or autosaving a notebook never touches the repository.
  It stops the server by its own process group, and then any kernel it started (kernels run in their
  own sessions, so they are found as the server's descendants and ended by their own ids).
* :func:`launch_browser` opens chromium headless with the flags ../shared/TOOLCHAIN.md lists.
* :class:`NotebookPage` is one notebook in one browser tab: run all, run one cell, type into a cell,
  read outputs, find and move sliders, dismiss the news prompt, take a screenshot of the whole notebook.

The page talks to JupyterLab through ``window.jupyterapp`` (the server runs with
``--LabApp.expose_app_in_browser=True``): its commands are the ones the menus run, and their promises
say when a cell has finished, which no amount of polling the DOM can tell reliably.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags that let Debian's chromium run headless as root in a container (TOOLCHAIN.md).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


# ----------------------------------------------------------------------------------------------
# The server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_course(dest: Path) -> Path:
    """The course directory as nbgrader sees it (source/, release/, the two config files), copied."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("artifacts", ".ipynb_checkpoints", "__pycache__")
    for d in ("source", "release"):
        if (REPO / d).is_dir():
            shutil.copytree(REPO / d, dest / d, ignore=ignore)
    shutil.copy2(REPO / "nbgrader_config.py", dest / "nbgrader_config.py")
    # The grader's package with its nbgrader_config.py, whose CourseDirectory.root is the folder above the
    # file: the copy, not the repository (the config names the package's plugins).
    shutil.copytree(REPO / "autograder", dest / "autograder", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("tests", "corpus", "samples", "kit", "bin", "__pycache__"))
    return dest


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from /proc)."""
    parent_of = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
            parent_of[int(p.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [c for c, pp in parent_of.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL (Linux prctl),
    so that a killed test run does not leave its server behind (the server then ends its kernels)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LabServer:
    """``jupyter lab`` on 127.0.0.1 in a temporary course copy; :meth:`stop` always cleans up."""

    def __init__(self, env_extra: dict[str, str] | None = None, startup_timeout: float = 120.0):
        self.tmp = Path(tempfile.mkdtemp(prefix="llmrl-browser-"))
        self.course = copy_course(self.tmp / "course")
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = self.tmp / "jupyter-lab.log"
        self.proc: subprocess.Popen | None = None
        self._descendants: set[int] = set()
        env = {k: v for k, v in os.environ.items()
               if k not in ("NBGRADER_EXECUTION", "MPLBACKEND", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR")}
        env.update({
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            # Everything JupyterLab would write into the home folder goes to the temporary folder.
            "JUPYTER_CONFIG_DIR": str(self.tmp / "config"),
            "JUPYTER_RUNTIME_DIR": str(self.tmp / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.tmp / "lab-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.tmp / "lab-workspaces"),
            "IPYTHONDIR": str(self.tmp / "ipython"),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(env_extra or {})
        self.env = env
        atexit.register(self.stop)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        cmd = [str(VENV_BIN / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--ServerApp.port_retries=0", "--allow-root", f"--ServerApp.token={self.token}",
               f"--ServerApp.root_dir={self.course}", "--LabApp.expose_app_in_browser=True",
               "--ServerApp.open_browser=False"]
        with open(self.log_path, "wb") as log:
            # Its own process group (start_new_session), so stop() ends it and only it.
            self.proc = subprocess.Popen(cmd, cwd=self.course, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"jupyter lab did not answer /api/status in {startup_timeout:.0f} s:\n"
                                       f"{self.log_tail()}")
                time.sleep(0.5)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def remember_children(self) -> None:
        """Note the server's current descendants (kernels), so stop() can end them by id."""
        if self.proc is not None and self.proc.poll() is None:
            self._descendants.update(_children(self.proc.pid))

    def shutdown_kernels(self) -> None:
        """End every kernel the server runs (between notebooks, to free the two cores)."""
        self.remember_children()
        for s in self.api("GET", "/api/sessions"):
            try:
                self.api("DELETE", f"/api/sessions/{s['id']}", timeout=30)
            except urllib.error.HTTPError:
                pass

    def stop(self) -> None:
        """Stop the server (its process group), then its kernels (by pid); remove the temporary folder."""
        proc, self.proc = self.proc, None
        if proc is not None:
            self.remember_children()
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)  # the group is the server's own (start_new_session)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
            # Kernels sit in sessions of their own: the server shuts them down on SIGTERM; any left
            # over is ended here by its own pid.
            deadline = time.monotonic() + 5
            left = [p for p in self._descendants if _alive(p)]
            while left and time.monotonic() < deadline:
                time.sleep(0.2)
                left = [p for p in left if _alive(p)]
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# The browser


def launch_browser(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


# JavaScript run in the page. ``jupyterapp`` is JupyterLab itself; ``panel()`` the open notebook.
JS_HELPERS = r"""
() => {
  if (window.__bt) return true;
  const app = window.jupyterapp;
  const bt = {};
  // The element that scrolls the notebook (WindowedList's outer node).
  bt.scroller = () => bt.panel().node.querySelector('.jp-WindowedPanel-outer') || bt.panel().content.node;
  bt.panel = () => {
    const w = app.shell.currentWidget;
    return (w && w.content && w.content.model && w.sessionContext) ? w : null;
  };
  bt.cells = () => bt.panel().content.widgets;
  bt.kernelStatus = () => {
    const p = bt.panel();
    const k = p && p.sessionContext.session && p.sessionContext.session.kernel;
    return k ? k.status : null;
  };
  bt.runAll = () => {
    bt.done = undefined;
    app.commands.execute('notebook:run-all-cells').then(r => { bt.done = {ok: r}; },
                                                       e => { bt.done = {ok: false, error: String(e)}; });
  };
  bt.runCell = (i) => {
    bt.done = undefined;
    const nb = bt.panel().content;
    nb.mode = 'command';
    nb.activeCellIndex = i;
    nb.deselectAll();
    app.commands.execute('notebook:run-cell').then(r => { bt.done = {ok: r}; },
                                                 e => { bt.done = {ok: false, error: String(e)}; });
  };
  bt.silent = (code) => bt.panel().sessionContext.session.kernel
      .requestExecute({code, silent: true, store_history: false}).done.then(m => m.content.status);
  bt.model = () => bt.panel().content.model.toJSON();
  bt.outputs = (i) => { const m = bt.cells()[i].model.toJSON(); return m.outputs || []; };
  bt.source = (i) => bt.cells()[i].model.sharedModel.getSource();
  bt.editCell = (i) => {
    const nb = bt.panel().content;
    nb.mode = 'command';
    nb.activeCellIndex = i;
    nb.deselectAll();
    nb.scrollToItem(i);
    nb.mode = 'edit';
    bt.cells()[i].editor.focus();
  };
  // Tag cells and sliders so that Playwright locators can find them.
  bt.tag = () => {
    bt.cells().forEach((c, i) => {
      c.node.setAttribute('data-bt-cell', String(i));
      c.node.querySelectorAll('.widget-slider').forEach((s, k) => s.setAttribute('data-bt-slider', String(k)));
    });
  };
  // What a widget shows besides its sliders: HTML text and images (a new value gives a new blob URL).
  bt.view = (i) => {
    const area = bt.cells()[i].node.querySelector('.jp-OutputArea');
    if (!area) return '';
    const html = [...area.querySelectorAll('.widget-html-content')].map(e => e.innerHTML);
    const imgs = [...area.querySelectorAll('img')].map(e => e.src + ':' + e.naturalWidth);
    return JSON.stringify({html, imgs});
  };
  bt.cellDom = (i) => {
    const node = bt.cells()[i].node;
    const area = node.querySelector('.jp-OutputArea');
    const text = area ? area.innerText : '';
    const imgs = area ? [...area.querySelectorAll('.jp-RenderedImage img')] : [];
    const sliders = area ? [...area.querySelectorAll('.widget-slider')] : [];
    return {
      widgets: area ? area.querySelectorAll('.jupyter-widgets').length : 0,
      widgetErrors: /Error displaying widget|Error rendering widget|model not found/i.test(text),
      loading: /Loading widget/i.test(text),
      images: imgs.length,
      imagesLoaded: imgs.filter(e => e.complete && e.naturalWidth > 0).length,
      widgetImages: area ? [...area.querySelectorAll('.jupyter-widgets img')].filter(e => e.naturalWidth > 0).length : 0,
      sliders: sliders.map(s => ({
        label: (s.querySelector('.widget-label') || {}).innerText || '',
        readout: (s.querySelector('.widget-readout') || {}).innerText || '',
        now: (s.querySelector('.noUi-handle') || {getAttribute: () => null}).getAttribute('aria-valuenow'),
        max: (s.querySelector('.noUi-handle') || {getAttribute: () => null}).getAttribute('aria-valuemax'),
      })),
      bars: area ? [...area.querySelectorAll('.widget-hprogress, .widget-vprogress')].map(b => {
        const bar = b.querySelector('.progress-bar');
        return {visible: b.offsetParent !== null, width: bar ? bar.style.width : '',
                danger: !!b.querySelector('.progress-bar-danger')};
      }) : [],
      rendered: node.classList.contains('jp-MarkdownCell') ? node.classList.contains('jp-mod-rendered') : null,
    };
  };
  // Progress bars come and go (tqdm closes a finished bar with leave=False): record every one seen.
  bt.bars = [];
  bt.watchBars = () => {
    const seen = new WeakSet();
    const note = () => {
      document.querySelectorAll('.jp-Notebook .widget-hprogress, .jp-Notebook .widget-vprogress').forEach(b => {
        if (seen.has(b)) return;
        seen.add(b);
        const cell = b.closest('[data-bt-cell]') || b.closest('.jp-Cell');
        const rec = {cell: cell ? cell.getAttribute('data-bt-cell') : null, maxWidth: 0, danger: false};
        bt.bars.push(rec);
        const upd = () => {
          const bar = b.querySelector('.progress-bar');
          const w = bar ? parseFloat(bar.style.width) || 0 : 0;
          rec.maxWidth = Math.max(rec.maxWidth, w);
          rec.danger = rec.danger || !!b.querySelector('.progress-bar-danger');
        };
        upd();
        new MutationObserver(upd).observe(b, {subtree: true, attributes: true});
      });
    };
    new MutationObserver(note).observe(document.body, {subtree: true, childList: true});
  };
  window.__bt = bt;
  return true;
}
"""


class NotebookPage:
    """One notebook open in its own tab of the shared browser context."""

    def __init__(self, context, server: LabServer, path: str, shots: Path, timeout_s: float = 600):
        self.server, self.path, self.shots, self.timeout_ms = server, path, shots, timeout_s * 1000
        self.page = context.new_page()
        self.page.set_default_timeout(60_000)
        self.page.goto(server.url(f"/lab/tree/{path}") + "&reset", wait_until="domcontentloaded")
        self.page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
        self.page.evaluate(JS_HELPERS)
        self.page.wait_for_function(
            """(p) => { const w = __bt.panel(); return w && w.context.path === p && w.context.isReady
                        && __bt.kernelStatus() === 'idle'; }""", arg=path, timeout=180_000)
        self.page.evaluate("() => { jupyterapp.shell.collapseLeft(); __bt.tag(); __bt.watchBars(); }")
        self.server.remember_children()

    # -- the news prompt ---------------------------------------------------------------------
    def dismiss_news(self, wait_s: float = 0.0) -> bool:
        """Answer "No" to JupyterLab's "get notified about official Jupyter news?" toast, if shown."""
        toast = self.page.locator(".Toastify__toast", has_text="news")
        deadline = time.monotonic() + wait_s
        while True:
            if toast.count() and toast.first.is_visible():
                toast.first.get_by_role("button", name="No", exact=True).click()
                toast.first.wait_for(state="detached", timeout=10_000)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)

    # -- running -----------------------------------------------------------------------------
    def _wait_done(self, what: str) -> dict:
        self.page.wait_for_function("() => __bt.done !== undefined", timeout=self.timeout_ms, polling=250)
        done = self.page.evaluate("() => __bt.done")
        self.page.evaluate("() => __bt.tag()")
        return done

    def run_all(self) -> dict:
        self.page.evaluate("() => __bt.runAll()")
        return self._wait_done("run all")

    def run_cell(self, i: int) -> list[dict]:
        self.page.evaluate("(i) => __bt.runCell(i)", i)
        self._wait_done(f"cell {i}")
        return self.outputs(i)

    def silent(self, code: str) -> str:
        return self.page.evaluate("(c) => __bt.silent(c)", code)

    # -- reading -----------------------------------------------------------------------------
    def model(self) -> dict:
        return self.page.evaluate("() => __bt.model()")

    def outputs(self, i: int) -> list[dict]:
        return self.page.evaluate("(i) => __bt.outputs(i)", i)

    def source(self, i: int) -> str:
        return self.page.evaluate("(i) => __bt.source(i)", i)

    def dom(self, i: int) -> dict:
        return self.page.evaluate("(i) => __bt.cellDom(i)", i)

    def view(self, i: int) -> str:
        return self.page.evaluate("(i) => __bt.view(i)", i)

    def wait_settled(self, i: int, quiet_s: float = 1.0, timeout_s: float = 60) -> None:
        """Wait until the kernel is idle and cell i's view has not changed for ``quiet_s``."""
        deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
        while time.monotonic() < deadline:
            now = (self.view(i), self.page.evaluate("() => __bt.kernelStatus()"))
            if now != last:
                last, since = now, time.monotonic()
            elif now[1] == "idle" and time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.2)
        raise TimeoutError(f"cell {i} kept changing for {timeout_s} s")

    def unrendered_markdown(self, timeout_s: float = 30) -> list[int]:
        """Markdown cells not rendered after each was scrolled into view (JupyterLab renders the cells
        out of view lazily), waiting up to ``timeout_s``; scrolls back to the top."""
        js = """() => __bt.cells().map((c, i) => [i, c.model.type, c.node.classList.contains('jp-mod-rendered')])
                     .filter(([i, t, r]) => t === 'markdown' && !r).map(([i]) => i)"""
        for i in self.page.evaluate(js):
            self.page.evaluate("(i) => __bt.panel().content.scrollToItem(i)", i)
            time.sleep(0.05)
        deadline = time.monotonic() + timeout_s
        left = self.page.evaluate(js)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.page.evaluate(js)
        self.page.evaluate("() => { __bt.scroller().scrollTop = 0; }")
        return left

    def bars_seen(self) -> list[dict]:
        return self.page.evaluate("() => __bt.bars")

    # -- writing -----------------------------------------------------------------------------
    def type_into(self, i: int, text: str) -> None:
        """Replace cell i's text the way a student does: click in, select all, type (pasted as one
        insertion, so the editor's auto-indent and bracket closing do not reshape the code)."""
        self.page.evaluate("(i) => __bt.editCell(i)", i)
        editor = self.page.locator(f'[data-bt-cell="{i}"] .cm-content')
        editor.click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.press("Delete")
        self.page.keyboard.insert_text(text)
        self.page.keyboard.press("Escape")

    # -- sliders -----------------------------------------------------------------------------
    def move_slider(self, i: int, k: int) -> None:
        """Move slider k of cell i with the keyboard (PageUp, or PageDown at the top of its range)."""
        handle = self.page.locator(f'[data-bt-cell="{i}"] [data-bt-slider="{k}"] .noUi-handle')
        handle.scroll_into_view_if_needed()
        now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
        at_top = now is not None and top is not None and float(now) >= float(top) - 1e-9
        handle.focus()
        self.page.keyboard.press("PageDown" if at_top else "PageUp")

    # -- pictures ----------------------------------------------------------------------------
    def screenshot_cell(self, i: int, name: str) -> Path:
        out = self.shots / name
        loc = self.page.locator(f'[data-bt-cell="{i}"]')
        loc.scroll_into_view_if_needed()
        loc.screenshot(path=str(out))
        return out

    def screenshot_notebook(self, name: str, max_height: int = 30000) -> Path:
        """The whole notebook as one tall PNG, stitched from screenshots while scrolling it."""
        from PIL import Image

        self.dismiss_news()
        box = self.page.evaluate("""() => { const n = __bt.scroller(); const r = n.getBoundingClientRect();
                                     return {x: r.x, y: r.y, w: r.width, h: n.clientHeight, total: n.scrollHeight}; }""")
        total = min(int(box["total"]), max_height)
        step = int(box["h"])
        sheet, y = None, 0
        scale = None
        while y < total:
            top = self.page.evaluate("(y) => { const n = __bt.scroller(); n.scrollTop = y; return n.scrollTop; }", y)
            time.sleep(0.3)  # let images and widgets in view paint
            png = self.page.screenshot(clip={"x": box["x"], "y": box["y"], "width": box["w"], "height": box["h"]})
            import io
            img = Image.open(io.BytesIO(png)).convert("RGB")
            if sheet is None:
                scale = img.width / box["w"]
                sheet = Image.new("RGB", (img.width, int(total * scale)), "white")
            sheet.paste(img, (0, int(top * scale)))
            if top + step >= total:
                break
            y = top + step
        out = self.shots / name
        sheet.save(out, optimize=True)
        return out

    def close(self) -> None:
        try:
            self.page.close()
        except Exception:  # the page may be gone with a crashed browser; the server is stopped anyway
            pass


def strip_solution_markers(src: str) -> str:
    """A source notebook's solution cell without the nbgrader marker lines: the correct answer."""
    return "\n".join(line for line in src.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def is_tqdm(output: dict) -> bool:
    import re
    text = output.get("data", {}).get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else text
    return WIDGET_MIME in output.get("data", {}) and bool(re.search(r"\d+/\d+ \[", text))


def cell_text(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


if __name__ == "__main__":  # a quick manual look: python jlab.py opens a server and prints its URL
    srv = LabServer({"LLMRL_FAST": "1"})
    print(srv.url("/lab"), file=sys.stderr)
    try:
        time.sleep(3600)
    finally:
        srv.stop()
