"""Logging in to the course's hub from an LMS with LTI 1.3 (hub/lti.py), against a real JupyterHub.

The test plays the LMS (the LTI platform): it makes its own RSA keys, serves their public half as a JWKS
on 127.0.0.1, starts the course's hub (hub/deploy, with lti.json in its folder) and launches users the
way Canvas or Moodle do: the OpenID login initiation at /hub/lti13/oauth_login, then the id_token (a JWT
signed with its key) posted to /hub/lti13/oauth_callback with the state the hub handed out. Nothing is
mocked: the hub fetches the keys over HTTP and checks the signature, issuer, audience, state and nonce.

Its own hub: ports 8600-8603 (JWKS on 8605, users' servers 8610-8649), folder /srv/llmrl-hub-lti-test,
accounts llmrl-l-*; all removed at the end.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

TEST_DIR = Path("/srv/llmrl-hub-lti-test")
PORT = 8600
JWKS_PORT = 8605
INSTRUCTOR, ADA, BOB = "llmrl-l-teacher", "llmrl-l-ada", "llmrl-l-bob"
ISSUER = "https://lms.example.edu"
CLIENT_ID = "10000000000042"
DEPLOYMENT = "42:course-rl-2026"
COURSE_CONTEXT = "course-rl-2026"
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
LTI = "https://purl.imsglobal.org/spec/lti/claim/"


def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Platform:
    """The LMS's side: a key pair, its JWKS served over HTTP, and signed launches."""

    def __init__(self):
        self.key, self.kid = _key(), uuid.uuid4().hex
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid=self.kid, alg="RS256", use="sig")
        body = json.dumps({"keys": [jwk]}).encode()
        self.fetched = 0
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                platform.fetched += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", JWKS_PORT), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def claims(self, login: str, roles: list[str], nonce: str, *, deployment=DEPLOYMENT, context=COURSE_CONTEXT,
               issuer=ISSUER, audience=CLIENT_ID) -> dict:
        now = int(time.time())
        return {
            "iss": issuer, "aud": audience, "sub": uuid.uuid5(uuid.NAMESPACE_URL, login).hex,
            "iat": now, "exp": now + 300, "nonce": nonce,
            "email": f"{login}@uni.example", "name": login.capitalize(),
            LTI + "version": "1.3.0", LTI + "message_type": "LtiResourceLinkRequest",
            LTI + "deployment_id": deployment, LTI + "target_link_uri": f"http://127.0.0.1:{PORT}/hub/",
            LTI + "resource_link": {"id": "link-1", "title": "The course's hub"},
            LTI + "context": {"id": context, "label": "RL-LLM", "title": "RL for language models"},
            LTI + "roles": roles, LTI + "custom": {"login": login},
        }

    def sign(self, claims: dict, key=None, kid=None) -> str:
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid})

    def close(self):
        self.server.shutdown()


@pytest.fixture(scope="module")
def lti_hub():
    import os

    if os.geteuid() != 0:
        pytest.fail("the hub tests need root: they create OS accounts (useradd)")
    from hub import deploy

    deploy.remove(TEST_DIR, log=lambda m: print(f"left over from an earlier run: {m}"))
    platform = Platform()
    cfg = deploy.HubConfig(dir=TEST_DIR, instructor=INSTRUCTOR, students=[ADA, BOB], port=PORT,
                           assignments=["lab11"])  # students' servers on unix sockets: no port range
    hub = None
    try:
        deploy.setup(cfg, log=lambda m: print(f"setup: {m}"))
        (TEST_DIR / "lti.json").write_text(json.dumps({
            "issuer": ISSUER, "client_id": CLIENT_ID,
            "authorize_url": f"http://127.0.0.1:{JWKS_PORT}/authorize",  # the LMS's page: never reached here
            "jwks_endpoint": f"http://127.0.0.1:{JWKS_PORT}/jwks",
            "deployment_ids": [DEPLOYMENT], "context_ids": [COURSE_CONTEXT],
            "username_key": "custom_login", "username_prefix": "llmrl-l-"}))
        token = secrets.token_hex(32)
        hub = deploy.start(cfg, driver_token=token, die_with_parent=True)
        yield cfg, platform, token, hub
    finally:
        if hub is not None:
            print(hub.log_tail(3000))
            hub.stop()
        platform.close()
        deploy.remove(TEST_DIR, log=lambda m: print(f"teardown: {m}"))
        assert not any(deploy.user_exists(n) for n in (INSTRUCTOR, ADA, BOB)), "accounts left behind"


def launch(cfg, platform, login: str, roles: list[str], **kw):
    """One LTI 1.3 launch in a fresh browser session: (the callback's response, the session)."""
    s = requests.Session()
    r = s.post(f"{cfg.url}/hub/lti13/oauth_login", data={
        "iss": ISSUER, "login_hint": login, "target_link_uri": f"{cfg.url}/hub/", "client_id": CLIENT_ID,
        "lti_deployment_id": kw.get("deployment", DEPLOYMENT), "lti_message_hint": "hint-1"},
        allow_redirects=False, timeout=60)
    assert r.status_code == 302, r.text[:500]
    to = urllib.parse.urlparse(r.headers["Location"])
    assert f"{to.scheme}://{to.netloc}{to.path}" == f"http://127.0.0.1:{JWKS_PORT}/authorize"
    q = dict(urllib.parse.parse_qsl(to.query))
    assert q["client_id"] == CLIENT_ID and q["response_type"] == "id_token" and q["lti_message_hint"] == "hint-1"
    claims = platform.claims(login, roles, kw.pop("nonce", q["nonce"]), **{k: v for k, v in kw.items()
                                                                          if k in ("deployment", "context", "issuer")})
    id_token = platform.sign(claims, key=kw.get("key"))
    r = s.post(f"{cfg.url}/hub/lti13/oauth_callback", data={"id_token": id_token, "state": q["state"]},
               allow_redirects=False, timeout=60)
    return r, s, id_token, q["state"]


def user(cfg, token, name):
    r = requests.get(f"{cfg.url}/hub/api/users/{name}", headers={"Authorization": f"token {token}"}, timeout=30)
    return r.json() if r.status_code == 200 else None


def test_an_instructor_and_a_learner_log_in_from_the_lms_into_their_groups(lti_hub):
    cfg, platform, token, _ = lti_hub
    r, session, _, _ = launch(cfg, platform, "teacher", [MEMBERSHIP + "Instructor"])
    assert r.status_code == 302, r.text[:500]
    assert platform.fetched >= 1, "the hub never fetched the LMS's keys"
    assert user(cfg, token, INSTRUCTOR)["groups"] == ["llmrl-instructors"]
    # the session is logged in: the hub's home page answers as that user
    home = session.get(f"{cfg.url}/hub/home", allow_redirects=False, timeout=60)
    assert home.status_code == 200 and INSTRUCTOR in home.text

    r, _, _, _ = launch(cfg, platform, "Ada", [MEMBERSHIP + "Learner",
                                              "http://purl.imsglobal.org/vocab/lis/v2/institution/person#Faculty"])
    assert r.status_code == 302, r.text[:500]
    assert user(cfg, token, ADA)["groups"] == ["llmrl-students"]

    # a teaching assistant (a sub-role of Instructor) grades: instructors' group; the LMS's roles win at
    # every login, so Bob, a TA this term, leaves the group when the LMS makes him a learner again
    r, _, _, _ = launch(cfg, platform, "bob", [MEMBERSHIP.rstrip("#") + "/Instructor#TeachingAssistant"])
    assert r.status_code == 302 and user(cfg, token, BOB)["groups"] == ["llmrl-instructors"]
    r, _, _, _ = launch(cfg, platform, "bob", [MEMBERSHIP + "Learner"])
    assert r.status_code == 302 and user(cfg, token, BOB)["groups"] == ["llmrl-students"]


@pytest.mark.parametrize("case, kw, status, says", [
    ("a token signed with another key", {"key": "other"}, 400, "Signature verification failed"),
    ("another LTI deployment", {"deployment": "43:another-tool"}, 403, "deployment"),
    ("another course of the LMS", {"context": "course-history-101"}, 403, "another course"),
    ("another issuer", {"issuer": "https://evil.example"}, 400, "Invalid issuer"),
    ("a nonce the hub never gave", {"nonce": "0" * 64}, 400, "nonce mismatch"),
])
def test_launches_the_hub_must_refuse(lti_hub, case, kw, status, says):
    cfg, platform, token, _ = lti_hub
    if kw.get("key") == "other":
        kw = {"key": _key()}
    before = user(cfg, token, ADA)
    r, _, _, _ = launch(cfg, platform, "ada", [MEMBERSHIP + "Instructor"], **kw)
    assert r.status_code == status and says in r.text, f"{case}: {r.status_code} {r.text[-1500:]}"
    after = user(cfg, token, ADA)
    assert (after or {}).get("groups") == (before or {}).get("groups"), f"{case} changed Ada's groups"


def test_roles_and_names_the_hub_does_not_know_are_refused_and_a_token_cannot_be_replayed(lti_hub):
    cfg, platform, token, _ = lti_hub
    r, _, _, _ = launch(cfg, platform, "ada", ["http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor"])
    assert r.status_code == 403 and "role" in r.text
    r, _, _, _ = launch(cfg, platform, "mallory", [MEMBERSHIP + "Learner"])
    assert r.status_code == 403 and "no account" in r.text
    assert user(cfg, token, "llmrl-l-mallory") is None
    # a captured id_token posted again from another browser: no state cookie there, refused
    r, _, id_token, state = launch(cfg, platform, "ada", [MEMBERSHIP + "Learner"])
    assert r.status_code == 302
    again = requests.post(f"{cfg.url}/hub/lti13/oauth_callback", data={"id_token": id_token, "state": state},
                          allow_redirects=False, timeout=60)
    assert again.status_code == 400
