"""Logging in to the course's JupyterHub from the LMS with LTI 1.3 (docs/hub.md, "Logging in from Canvas or
Moodle"), on jupyterhub-ltiauthenticator.

The LMS (the LTI *platform*) starts a login at the hub (/hub/lti13/oauth_login), the hub sends the browser back
to the LMS's authorisation page with a state and a nonce, and the LMS posts a signed id_token (a JWT) to
/hub/lti13/oauth_callback. ltiauthenticator checks the signature against the LMS's published keys (its JWKS),
the issuer, the audience (our client id), the state cookie, the nonce and the token's age. On top of that this
authenticator checks what the course needs:

- the launch comes from one of the course's LTI deployments (and, when `context_ids` is set, from one of its
  LMS courses): another course on the same LMS cannot log in to this hub;
- the user name: a claim (`username_key`, e.g. the login the LMS sends as a custom parameter) made into a
  hub account name, `username_prefix` + the value in lower case with anything but a-z, 0-9 and "-" turned
  into "-" (`llmrl-ada`); the accounts are the hub's OS accounts (hub/deploy --students), so only
  those names may log in;
- the LMS roles: Instructor, TeachingAssistant, ContentDeveloper or Administrator of the course put the user
  in the group llmrl-instructors (the formgrader), Learner in llmrl-students; anyone else (a mentor, a
  guest) is refused. The groups follow the LMS at every login (JupyterHub's manage_groups).

jupyterhub_config.py switches to it when the hub's folder holds lti.json (`configure`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ltiauthenticator.lti13.auth import LTI13Authenticator
from tornado.web import HTTPError
from traitlets import Set, Unicode

ROLES = "https://purl.imsglobal.org/spec/lti/claim/roles"
DEPLOYMENT = "https://purl.imsglobal.org/spec/lti/claim/deployment_id"
CONTEXT = "https://purl.imsglobal.org/spec/lti/claim/context"
INSTRUCTORS, STUDENTS = "llmrl-instructors", "llmrl-students"
# LTI 1.3 role URIs (LIS vocabulary); a short name ("Instructor") is accepted too, as some LMSs send it.
STAFF = ("Instructor", "TeachingAssistant", "ContentDeveloper", "Administrator")
LEARNER = ("Learner",)
NAME_RE = re.compile(r"^llmrl-[a-z0-9][a-z0-9-]{0,25}$")  # hub/deploy's account names (deploy/config.py)


def role_names(roles) -> set[str]:
    """'http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor' -> 'Instructor';
    '.../membership/Instructor#TeachingAssistant' -> 'TeachingAssistant'. Institution and system roles
    (vocab/lis/v2/institution/person#..., system/person#...) say nothing about this course: left out."""
    out = set()
    for r in roles if isinstance(roles, list) else []:
        if not isinstance(r, str):
            continue
        if "/institution/" in r or "/system/" in r:
            continue
        out.add(re.split(r"[#/]", r)[-1])
    return out


def groups_for(roles) -> list[str]:
    names = role_names(roles)
    if names & set(STAFF):
        return [INSTRUCTORS]
    if names & set(LEARNER):
        return [STUDENTS]
    return []


class CourseLTI13Authenticator(LTI13Authenticator):
    """LTI 1.3 for the course's hub: the deployment and course checked, hub account names, groups from roles."""

    deployment_ids = Set(Unicode(), config=True, help="The LTI deployment ids of the course's tool registration "
                                                      "(the LMS shows them); launches from any other are refused.")
    context_ids = Set(Unicode(), config=True, help="The LMS course ids (the context claim's id) allowed to log "
                                                   "in; empty: any course of the deployments.")
    username_prefix = Unicode("llmrl-", config=True, help="Put before the claim's value to make the hub account's name.")
    accounts = Set(Unicode(), config=True, help="The hub's accounts; an LMS user whose name is not one is refused.")

    def hub_name(self, value: str) -> str:
        name = self.username_prefix + re.sub(r"[^a-z0-9-]+", "-", str(value).strip().lower()).strip("-")
        return name

    async def authenticate(self, handler, data=None):
        data = data or {}
        deployment = str(data.get(DEPLOYMENT, ""))
        if not self.deployment_ids or deployment not in self.deployment_ids:
            raise HTTPError(403, f"this hub does not take launches from LTI deployment {deployment!r}")
        context = data.get(CONTEXT) if isinstance(data.get(CONTEXT), dict) else {}
        if self.context_ids and str(context.get("id", "")) not in self.context_ids:
            raise HTTPError(403, f"this hub serves another course than {context.get('label') or context.get('id')!r}")
        groups = groups_for(data.get(ROLES))
        if not groups:
            raise HTTPError(403, f"no course role the hub knows (roles: {sorted(role_names(data.get(ROLES)))}); "
                                 f"it lets in instructors, teaching assistants and learners")
        name = self.hub_name(self.get_username(data))
        if not NAME_RE.fullmatch(name) or (self.accounts and name not in self.accounts):
            raise HTTPError(403, f"{name!r} has no account on this hub: ask the instructor to add it")
        return {"name": name, "groups": groups, "auth_state": None}


def configure(c, path: Path, settings: dict) -> None:
    """Switch the hub's configuration `c` from PAM to LTI 1.3 with the settings in `path` (lti.json):

        {"issuer": "https://canvas.instructure.com", "client_id": "10000000000042",
         "authorize_url": "https://canvas.example.edu/api/lti/authorize_redirect",
         "jwks_endpoint": "https://canvas.example.edu/api/lti/security/jwks",
         "deployment_ids": ["42:8865aa05b4b79b64a91a86042e43af5ea8ae79eb"],
         "context_ids": [], "username_key": "custom_login", "username_prefix": "llmrl-"}
    """
    s = json.loads(Path(path).read_text())
    missing = [k for k in ("issuer", "client_id", "authorize_url", "jwks_endpoint", "deployment_ids") if not s.get(k)]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)} (docs/hub.md, \"Logging in from Canvas or Moodle\")")
    c.JupyterHub.authenticator_class = CourseLTI13Authenticator
    a = c.CourseLTI13Authenticator
    a.issuer = s["issuer"]
    a.client_id = {s["client_id"]} if isinstance(s["client_id"], str) else set(s["client_id"])
    a.authorize_url = s["authorize_url"]
    a.jwks_endpoint = s["jwks_endpoint"]
    a.deployment_ids = set(s["deployment_ids"])
    a.context_ids = set(s.get("context_ids") or [])
    a.username_key = s.get("username_key", "custom_login")
    a.username_prefix = s.get("username_prefix", "llmrl-")
    a.accounts = {settings["instructor"], *settings["students"]}
    if s.get("uri_scheme"):
        a.uri_scheme = s["uri_scheme"]
    # Group membership comes from the LMS's roles at each login, not from the settings file.
    c.Authenticator.manage_groups = True
    c.JupyterHub.load_groups = {}
    c.Authenticator.allowed_users = set()
    c.Authenticator.allow_all = True  # who may log in is decided above: deployment, course, role, account
