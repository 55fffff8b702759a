"""Set up, start and remove the course's JupyterHub on 127.0.0.1 (run as root).

    .venv/bin/python -m hub.deploy up      [options]   set up (idempotent), then run the hub until Ctrl-C
    .venv/bin/python -m hub.deploy setup   [options]   only set up
    .venv/bin/python -m hub.deploy remove  [--dir D]   stop the hub, delete its accounts (homes, the
                                                       course folder and its grades included) and D

What `setup` makes (everything it creates is listed in D/manifest.json, and `remove` removes
exactly that; an existing account it did not create is never touched):

- OS accounts: one instructor and the students (useradd; names start with `llmrl-`), homes 0700,
  random passwords kept in D/state/passwords.json (root only). The hub logs them in with PAM.
- Each student's own filesystem (limits.py): an ext4 image D/images/<student>.img of the disk limit,
  mounted on D/users/<student> (nosuid, nodev): their home (home/), their /tmp (tmp/) and their inbound
  (inbound/, where their submissions go). The hub's cgroups (memory and processes per student, and for
  the class) are made when the hub starts; their servers run inside them (confine.py).
- The Python environment the users' servers run in. This repository's .venv is used when every
  account can run it (checked as a student: `import llmrl, nbgrader, jupyterhub`); when its
  interpreter sits somewhere they cannot enter (a pyenv Python under /root, mode 0700), D/python is
  a copy of that interpreter (the same release: Debian's 3.11.2 cannot run nbconvert's HTML export)
  and D/env a small environment on it that adds .venv's packages (no second install), with .venv's
  jupyter data (extensions, kernels) and console scripts.
- nbgrader's exchange D/exchange (mode 1777, like /tmp, which nbgrader requires) with the course's folder
  in it made now, owned by the instructor (a student cannot create it first and block the release):
  outbound/ (released assignments), feedback/ (0711) and inbound/ (0700: each student's server sees
  their own inbound in its place; the course's collect reads them all), and the course folder
  ~instructor/llmrl (0700, owned by the instructor):
  source/ and the grader (autograder/) copied from this repository, release/ generated there, the
  gradebook with the assignments and the students.
- The model cache D/cache (written by the instructor, read by everyone).
- Configuration: D/jupyter/users (students' servers: the exchange, the assignment list, no
  formgrader), D/jupyter/formgrader (the course service), D/hub.json (read by jupyterhub_config.py).

The package's files, one job each (each imports only those above it):

    config.py          HubConfig (accounts, ports, limits, folders), HubError, the shared constants
    files.py           chown_tree, write_json
    manifest.py        D/manifest.json; the repository's instructor-only entries closed and reopened
    student_limits.py  each student's filesystem, the disk check, the hub's cgroups (hub/limits.py)
    accounts.py        OS accounts, passwords, their processes, run_as
    environment.py     the Python environment the users run
    course.py          the exchange, the model cache, the instructor's course folder
    configs.py         D/hub.json and the users' and the course service's jupyter configuration
    running.py         start (jupyterhub, waited for) and RunningHub.stop
    provision.py       setup and remove: the steps in order
    __main__.py        the command line above

What the rest of the hub and its tests use is importable from here (`from hub import deploy`).
"""

from hub.deploy.accounts import end_processes_of, require_root, run_as, uid_of, user_environment, user_exists
from hub.deploy.config import COURSE_ID, DEFAULT_DIR, REPO, HubConfig, HubError, env_dir, home_of
from hub.deploy.course import GRADER_LEFT_OUT, make_exchange
from hub.deploy.manifest import INSTRUCTOR_ONLY
from hub.deploy.provision import remove, setup
from hub.deploy.running import RunningHub, start

__all__ = ["COURSE_ID", "DEFAULT_DIR", "GRADER_LEFT_OUT", "INSTRUCTOR_ONLY", "REPO", "HubConfig", "HubError",
           "RunningHub", "end_processes_of", "env_dir", "home_of", "make_exchange", "remove", "require_root",
           "run_as", "setup", "start", "uid_of", "user_environment", "user_exists"]
