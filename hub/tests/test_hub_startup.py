"""How jupyterhub loads the course's configuration, as hub/deploy starts it (make test-hub: it needs the hub
extra, jupyterhub, but no running hub): hub/jupyterhub_config.py exec'd in the hub's state folder with
the environment deploy.start gives jupyterhub finds the hub's package through PYTHONPATH alone, loads
each of the hub's files once, and hands the on-submit service an environment in which `python -m
hub.on_submit` starts, with the course folder (its copy of the grader) ahead of the repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hub import deploy
from hub.deploy.config import VENV
from hub.deploy.configs import write_settings
from hub.deploy.running import hub_environment

HUB = Path(__file__).resolve().parents[1]
LOAD = r'''
import json, os, sys
from traitlets.config.loader import PyFileConfigLoader
c = PyFileConfigLoader("jupyterhub_config.py", path=sys.argv[1]).load_config()
spawner = c.JupyterHub.spawner_class
files = {}
for name, module in list(sys.modules.items()):
    f = getattr(module, "__file__", None)
    if f:
        files.setdefault(os.path.realpath(f), []).append(name)
print(json.dumps({"spawner": f"{spawner.__module__}.{spawner.__qualname__}", "services": c.JupyterHub.services,
                  "env_keep": c.Spawner.env_keep, "files": files}))
'''


def _hub_config(tmp_path) -> deploy.HubConfig:
    cfg = deploy.HubConfig(dir=tmp_path / "hub", instructor="llmrl-t-nobody", students=["llmrl-t-nobody1"],
                           port=8590)
    cfg.state.mkdir(parents=True)
    write_settings(cfg, VENV)
    return cfg


def test_the_hubs_configuration_finds_the_package_through_the_environment_deploy_gives_it(tmp_path):
    cfg = _hub_config(tmp_path)
    env = hub_environment(cfg, driver_token="t" * 64)
    assert env["PYTHONPATH"] == str(deploy.REPO)
    # -P: nothing but PYTHONPATH puts the repository on the path (jupyterhub's own sys.path[0] is .venv/bin)
    proc = subprocess.run([str(VENV / "bin" / "python"), "-P", "-c", LOAD, str(HUB)], cwd=cfg.state, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["spawner"] == "hub.spawner.CourseSpawner"
    assert out["env_keep"] == ["LANG", "LC_ALL"], "the hub's PYTHONPATH would reach the students' servers"
    hub_files = {f: names for f, names in out["files"].items() if Path(f).is_relative_to(HUB)}
    assert hub_files and all(len(names) == 1 and names[0].startswith("hub") for names in hub_files.values()), hub_files
    assert str(HUB / "spawner.py") in hub_files and str(HUB / "limits.py") in hub_files

    services = {s["name"]: s for s in out["services"]}
    course, on_submit = services[deploy.COURSE_ID], services[f"{deploy.COURSE_ID}-on-submit"]
    assert course["environment"]["PYTHONPATH"] == str(cfg.course_dir)
    service_env = on_submit["environment"]
    assert service_env["PYTHONPATH"].split(":") == [str(cfg.course_dir), str(deploy.REPO)]
    assert on_submit["command"][1:3] == ["-m", "hub.on_submit"]
    # the service as the hub starts it: in its own folder, with its own environment only
    folder = Path(on_submit["cwd"])
    folder.mkdir(parents=True)
    proc = subprocess.run([*on_submit["command"][:3], "--help"], cwd=folder, env=service_env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "python -m hub.on_submit" in proc.stdout, proc.stderr[-3000:]

