"""The configuration files the hub reads: D/hub.json (the settings jupyterhub_config.py, confine.py,
spawner.py and the on-submit service read), D/jupyter/users (the students' servers: the exchange, the
assignment list, no formgrader) and D/jupyter/formgrader (the course service)."""

from __future__ import annotations

import sys
from pathlib import Path

from hub import on_submit
from hub.deploy.config import COURSE_ID, HUB, PROXY, REPO, HubConfig
from hub.deploy.files import write_json
from hub.deploy.student_limits import cgroups_of


def write_jupyter_configs(cfg: HubConfig) -> None:
    """What the students' servers and the course service load besides the environment's own config."""
    nbgrader_users = ("# nbgrader settings of the students' servers (written by hub/deploy)\n"
                      "c = get_config()  # noqa: F821\n"
                      f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
                      f"c.Exchange.root = {str(cfg.exchange)!r}\n")
    (cfg.users_config).mkdir(parents=True, exist_ok=True)
    (cfg.users_config / "nbgrader_config.py").write_text(nbgrader_users)
    # Kernels talk over unix sockets (no TCP ports beyond the hub's ranges).
    kernels = {"KernelManager": {"transport": "ipc"}}
    write_json(cfg.users_config / "jupyter_server_config.json", dict(kernels, ServerApp={"jpserver_extensions": {
        "nbgrader.server_extensions.formgrader": False,      # the course's gradebook is not theirs
        "nbgrader.server_extensions.course_list": False,
        "nbgrader.server_extensions.assignment_list": True,
        "nbgrader.server_extensions.validate_assignment": True}}))
    write_json(cfg.users_config / "labconfig" / "page_config.json", {"disabledExtensions": {
        "@jupyter/nbgrader:formgrader": True, "@jupyter/nbgrader:create-assignment": True,
        "@jupyter/nbgrader:course-list": True}})
    # The course service (the instructor's formgrader). The hub forbids framing it (frame-ancestors 'none'),
    # so JupyterLab's Formgrader panel, an iframe, is switched off: the formgrader opens in its own tab.
    # autograder.formgrader.safe_formgrader (in the course folder's copy of the grader) loads nbgrader's formgrader with
    # its Manual Grading page made inert: nbgrader's own extension is off, so without it there is no formgrader.
    write_json(cfg.service_config / "jupyter_server_config.json", dict(kernels, ServerApp={"jpserver_extensions": {
        "autograder.formgrader.safe_formgrader": True,
        "nbgrader.server_extensions.formgrader": False,
        "nbgrader.server_extensions.course_list": False,
        "nbgrader.server_extensions.assignment_list": False,
        "nbgrader.server_extensions.validate_assignment": True}}))
    write_json(cfg.service_config / "labconfig" / "page_config.json", {"disabledExtensions": {
        "@jupyter/nbgrader:formgrader": True, "@jupyter/nbgrader:assignment-list": True,
        "@jupyter/nbgrader:course-list": True}})
    for p in [cfg.dir / "jupyter", *(cfg.dir / "jupyter").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def write_settings(cfg: HubConfig, env: Path) -> None:
    settings = {
        "repo": str(REPO), "env": str(env), "python": str(env / "bin" / "python"), "proxy": str(PROXY),
        "course_id": COURSE_ID, "instructor": cfg.instructor, "students": cfg.students,
        "ip": "127.0.0.1", "port": cfg.port, "proxy_api_port": cfg.proxy_api_port, "hub_port": cfg.hub_port,
        "service_port": cfg.service_port,
        "state": str(cfg.state), "exchange": str(cfg.exchange), "cache": str(cfg.cache),
        "users_dir": str(cfg.users_dir), "socket_dir": str(cfg.socket_dir), "limits": cfg.limits.as_dict(),
        "cgroups": cgroups_of(cfg).state(), "confine_python": sys.executable,
        "singleuser": [str(env / "bin" / "python"), "-m", "jupyterhub.singleuser"],
        "course_dir": str(cfg.course_dir), "users_config": str(cfg.users_config),
        "service_config": str(cfg.service_config), "templates": str(HUB / "templates"),
        "grader": cfg.grader,
        "on_submit": {"dir": str(cfg.on_submit_dir), "poll_s": 2.0, "rate_per_hour": cfg.on_submit_rate,
                      "workers": cfg.on_submit_workers or on_submit.default_workers()},
    }
    write_json(cfg.settings, settings)
    cfg.settings.chmod(0o644)
