"""HTTP clients for a running course hub: the hub's REST API, a user's own server and the formgrader.

Every request carries one account's token, so what a test does as a student is what that student
could do from their browser or a script: nothing here reaches past the hub's own access checks.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass


class HTTPFailure(Exception):
    def __init__(self, method: str, url: str, status: int, body: str):
        super().__init__(f"{method} {url} -> {status}: {body[:500]}")
        self.status, self.body = status, body


@dataclass
class Client:
    base: str    # e.g. http://127.0.0.1:8550
    token: str

    def request(self, method: str, path: str, body=None, form: dict | None = None, timeout: float = 60.0,
                raw: bool = False):
        url = self.base + path
        headers = {"Authorization": f"token {self.token}"}
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                payload = r.read()
        except urllib.error.HTTPError as e:
            raise HTTPFailure(method, url, e.code, e.read().decode(errors="replace")) from None
        if raw:
            return payload
        return json.loads(payload) if payload.strip() else None

    def status_of(self, method: str, path: str, **kw) -> int:
        """The HTTP status of a request (redirects not followed), for access checks."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a, **k):
                return None
        opener = urllib.request.build_opener(NoRedirect)
        req = urllib.request.Request(self.base + path, method=method, headers={"Authorization": f"token {self.token}"},
                                     data=b"" if method in ("POST", "PUT") else None)
        try:
            with opener.open(req, timeout=kw.get("timeout", 30)) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code


class HubAPI(Client):
    """/hub/api with the test driver's token (a service with admin:users, admin:servers, tokens)."""

    def user(self, name: str) -> dict:
        return self.request("GET", f"/hub/api/users/{name}")

    def new_token(self, name: str, note: str = "llmrl hub test") -> str:
        return self.request("POST", f"/hub/api/users/{name}/tokens", {"note": note, "expires_in": 3600})["token"]


@dataclass
class UserServer(Client):
    """One user's single-user server (/user/<name>/) with that user's own token."""

    name: str = ""

    @property
    def prefix(self) -> str:
        return f"/user/{self.name}"

    def start(self) -> None:
        """Ask the hub to spawn this user's server (the user's own token may)."""
        try:
            self.request("POST", f"/hub/api/users/{self.name}/server", timeout=60)
        except HTTPFailure as e:
            if e.status != 400 or "already running" not in e.body:
                raise

    def wait_ready(self, timeout: float = 240.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            info = self.request("GET", f"/hub/api/users/{self.name}")
            server = (info.get("servers") or {}).get("")
            if server and server.get("ready"):
                return server
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}'s server not ready in {timeout:.0f} s: {info.get('servers')}")
            time.sleep(0.5)

    # nbgrader's assignment list (the student's own exchange client, running in their server)
    def assignments(self, course_id: str) -> list[dict]:
        r = self.request("GET", f"{self.prefix}/assignments?course_id={course_id}", timeout=120)
        assert r["success"], f"{self.name}: assignment list failed: {r['value']}"
        return r["value"]

    def action(self, action: str, course_id: str, assignment_id: str):
        r = self.request("POST", f"{self.prefix}/assignments/{action}",
                         form={"course_id": course_id, "assignment_id": assignment_id}, timeout=180)
        if isinstance(r, dict) and not r.get("success", True):
            raise AssertionError(f"{self.name}: {action} {assignment_id} failed: {r.get('value')}")
        return r["value"] if isinstance(r, dict) else r

    # the Contents API (what JupyterLab's editor saves through)
    def get_notebook(self, path: str) -> dict:
        return self.request("GET", f"{self.prefix}/api/contents/{urllib.parse.quote(path)}?content=1")["content"]

    def put_notebook(self, path: str, nb: dict) -> dict:
        return self.request("PUT", f"{self.prefix}/api/contents/{urllib.parse.quote(path)}",
                            {"type": "notebook", "format": "json", "content": nb})

    def listdir(self, path: str = "") -> list[str]:
        return [e["name"] for e in self.request("GET", f"{self.prefix}/api/contents/{urllib.parse.quote(path)}")["content"]]


@dataclass
class Formgrader(Client):
    """The course service's formgrader API (/services/<course>/formgrader/api) with a grader's token."""

    course: str = ""

    @property
    def prefix(self) -> str:
        return f"/services/{self.course}/formgrader/api"

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request("GET", f"/services/{self.course}/api/status", timeout=10)
                return
            except (HTTPFailure, OSError) as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the course service did not answer in {timeout:.0f} s: {e}") from None
            time.sleep(0.5)

    def get(self, path: str):
        return self.request("GET", self.prefix + path, timeout=120)

    def post(self, path: str) -> dict:
        r = self.request("POST", self.prefix + path, body={}, timeout=300)
        assert r.get("success"), f"formgrader {path} failed: {(r.get('error') or r.get('log') or '')[-2000:]}"
        return r

    def put(self, path: str, body: dict) -> dict:
        return self.request("PUT", self.prefix + path, body=body, timeout=60)
