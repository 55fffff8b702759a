"""JupyterHub configuration of the course (jupyterhub 6.1.1), started by hub/deploy (running.start:
`jupyterhub -f hub/jupyterhub_config.py`, with the repository on PYTHONPATH for the hub's package).

Everything that depends on the machine (ports, folders, accounts, the Python environment) comes from
the settings file hub/deploy writes ($LLMRL_HUB_SETTINGS); the rest is the course's choice:

- PAM: the accounts log in with their OS passwords (a local course on one machine).
- CourseSpawner: each student's JupyterLab runs as that OS user, in its home, inside the student's
  limits (confine.py: cgroups, mount namespace, rlimits), on a unix socket of its own (no TCP port).
- The formgrader is a hub-managed service named after the course (`jupyterhub-singleuser` as the
  instructor, in the course folder), reachable by the group llmrl-instructors only. The hub
  forbids framing its pages, so it opens in its own tab: /services/<course>/formgrader, linked from
  the instructor's home page and the Services menu.
- Students' servers get nbgrader's assignment list (fetch, submit, fetch feedback) and no formgrader.
"""

import json
import os
from pathlib import Path

from hub.spawner import CourseSpawner

S = json.loads(Path(os.environ["LLMRL_HUB_SETTINGS"]).read_text())
COURSE = S["course_id"]
STATE = Path(S["state"])
PATH = f"{Path(S['python']).parent}:/usr/local/bin:/usr/bin:/bin"
SINGLEUSER = [S["python"], "-m", "jupyterhub.singleuser"]

c = get_config()  # noqa: F821

# ----------------------------------------------------------------------------- the hub
c.JupyterHub.bind_url = f"http://{S['ip']}:{S['port']}"
c.JupyterHub.hub_bind_url = f"http://{S['ip']}:{S['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://{S['ip']}:{S['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [S["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True   # stopping the hub stops every user's server
c.JupyterHub.template_paths = [S["templates"]]
c.JupyterHub.template_vars = {"course_id": COURSE, "formgrader_path": f"services/{COURSE}/formgrader"}

# ----------------------------------------------------------------------------- who may log in
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login sessions for a web server's processes
c.Authenticator.allowed_users = {S["instructor"], *S["students"]}
c.Authenticator.admin_users = set()
c.JupyterHub.load_groups = {
    "llmrl-instructors": {"users": [S["instructor"]]},
    "llmrl-students": {"users": list(S["students"])},
}
c.JupyterHub.load_roles = [
    {
        "name": "llmrl-formgrader",
        "description": "The course's formgrader (the course service), for instructors only",
        "groups": ["llmrl-instructors"],
        "scopes": [f"access:services!service={COURSE}", "list:services", f"read:services!service={COURSE}"],
    },
]
# Logging in from the LMS (LTI 1.3) instead of PAM when the hub's folder holds lti.json: hub/lti.py,
# docs/hub.md "Logging in from Canvas or Moodle" (groups then follow the LMS's roles at each login).
if (STATE.parent / "lti.json").exists():
    from hub.lti import configure as configure_lti

    configure_lti(c, STATE.parent / "lti.json", S)
# The hub's tests drive it as a service with this token (set only by them).
if os.environ.get("LLMRL_HUB_DRIVER_TOKEN"):
    c.JupyterHub.services = [{"name": "llmrl-test-driver", "api_token": os.environ["LLMRL_HUB_DRIVER_TOKEN"]}]
    c.JupyterHub.load_roles.append({
        "name": "llmrl-test-driver",
        "services": ["llmrl-test-driver"],
        "scopes": ["admin:users", "admin:servers", "admin:server_state", "tokens", "read:groups"],
    })
else:
    c.JupyterHub.services = []


def default_url(handler):
    """Instructors land on the hub's home page (the formgrader button); students in their JupyterLab."""
    user = handler.current_user
    if user is not None and any(g.name == "llmrl-instructors" for g in user.groups):
        return handler.hub.base_url + "home"
    return ""


c.JupyterHub.default_url = default_url

# ----------------------------------------------------------------------------- the users' servers
c.JupyterHub.spawner_class = CourseSpawner
c.CourseSpawner.settings_file = os.environ["LLMRL_HUB_SETTINGS"]
c.CourseSpawner.python = S["confine_python"]
c.Spawner.cmd = SINGLEUSER  # CourseSpawner runs it through confine.py
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.env_keep = ["LANG", "LC_ALL"]  # nothing of root's environment (its PATH, VIRTUAL_ENV) leaks in
c.Spawner.environment = {
    "PATH": PATH,
    "JUPYTER_CONFIG_PATH": S["users_config"],  # the exchange, the assignment list, no formgrader
    "LLMRL_CACHE": S["cache"],                 # the course's models, read-only for students
    "PYTHONUNBUFFERED": "1",
}
# A loaded 2-core machine takes a while to start JupyterLab.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180

# ----------------------------------------------------------------------------- the formgrader service
c.JupyterHub.services.append({
    "name": COURSE,
    "display": True,
    "url": f"http://{S['ip']}:{S['service_port']}",
    "command": SINGLEUSER,
    "user": S["instructor"],
    "cwd": S["course_dir"],
    "oauth_no_confirm": True,
    "environment": {
        "PATH": PATH,
        "JUPYTERHUB_DEFAULT_URL": "/formgrader",
        "JUPYTER_CONFIG_PATH": S["service_config"],
        # the grader's package in the course folder (autograder.formgrader.safe_formgrader, the course's formgrader;
        # the collect and export plugins); the grader keeps this folder off every kernel's path
        "PYTHONPATH": S["course_dir"],
        "LLMRL_CACHE": S["cache"],
        "PYTHONUNBUFFERED": "1",
    },
})

# ----------------------------------------------------------------------------- grading on submit
# hub/on_submit as a hub-managed service: root's (it reads the students' inbounds and writes their
# feedback as each student), grading as the grading account; it stops with the hub and resumes its
# queue when the hub starts again. Nothing is graded until the instructor turns an assignment on
# (`python course_tool.py on-submit ASSIGNMENT feedback|score`).
if S.get("on_submit"):
    c.JupyterHub.services.append({
        "name": f"{COURSE}-on-submit",
        "command": [S["confine_python"], "-m", "hub.on_submit", "serve", os.environ["LLMRL_HUB_SETTINGS"]],
        "cwd": S["on_submit"]["dir"],
        # the hub's package from the repository; the grader's (its collect) from the course folder's copy
        "environment": {"PATH": PATH, "PYTHONPATH": f"{S['course_dir']}:{S['repo']}", "PYTHONUNBUFFERED": "1",
                        "LANG": "C.UTF-8"},
    })
