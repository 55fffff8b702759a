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
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "hub"
sys.path.insert(0, str(HERE))
import limits as L  # noqa: E402
import on_submit  # noqa: E402
VENV = REPO / ".venv"
PROXY = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_ID = "llmrl"
NAME_RE = re.compile(r"^llmrl-[a-z0-9][a-z0-9-]{0,25}$")
DEFAULT_DIR = Path("/srv/llmrl-hub")
# What a user's server imports (and nbconvert's HTML export, which needs a re module without 3.11.2's
# possessive-quantifier bugs): if this runs as a student, the environment is usable.
PROBE = ("import llmrl, nbgrader, jupyterhub, jupyterlab, torch, soupsieve; soupsieve.compile('img:not([alt])'); "
         "print(llmrl.__file__)")
# The grader's package as the course folder needs it (autograder/: not its tests, corpus, samples, the student
# kit's builder or the shell wrappers of the repository's .venv).
GRADER_LEFT_OUT = ("tests", "corpus", "samples", "kit", "bin", "__pycache__", "*.pyc")


class HubError(Exception):
    """Something the person running the hub must fix; the message says what."""


@dataclass
class HubConfig:
    dir: Path = DEFAULT_DIR
    instructor: str = "llmrl-instructor"
    students: list[str] = field(default_factory=lambda: ["llmrl-s1", "llmrl-s2", "llmrl-s3"])
    port: int = 8500                 # public; the proxy's API, the hub and the course service use the next three
    assignments: list[str] | None = None  # default: every assignment with source notebooks
    limits: L.Limits = field(default_factory=L.Limits)  # each student's (and the class's) limits
    grader: str = ""                 # the account grading on submit (default: the instructor's name + "-grader")
    on_submit_workers: int = 0       # gradings on submit at once (0: one per free core, on_submit.py)
    on_submit_rate: int = 10         # gradings on submit of one student in an hour, at most

    def __post_init__(self):
        self.dir = Path(self.dir).resolve()
        self.grader = self.grader or f"{self.instructor[:25]}-grader"
        for name in [self.instructor, *self.students, self.grader]:
            if not NAME_RE.match(name):
                raise HubError(f"account name {name!r}: it must start with 'llmrl-' and hold only a-z, 0-9 and '-' "
                               "(at most 32 characters)")
        if len(set(self.students)) != len(self.students) or self.instructor in self.students or \
                self.grader in (self.instructor, *self.students):
            raise HubError("every account name must be different")
        if not 0 < self.port < 65533:
            raise HubError(f"port {self.port}: the hub needs it and the next three")

    # the hub's four ports
    @property
    def proxy_api_port(self) -> int:
        return self.port + 1

    @property
    def hub_port(self) -> int:
        return self.port + 2

    @property
    def service_port(self) -> int:
        return self.port + 3

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # paths
    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def exchange(self) -> Path:
        return self.dir / "exchange"

    @property
    def cache(self) -> Path:
        return self.dir / "cache"

    @property
    def users_config(self) -> Path:
        return self.dir / "jupyter" / "users"

    @property
    def service_config(self) -> Path:
        return self.dir / "jupyter" / "formgrader"

    @property
    def settings(self) -> Path:
        return self.dir / "hub.json"

    @property
    def manifest(self) -> Path:
        return self.dir / "manifest.json"

    @property
    def users_dir(self) -> Path:  # each student's filesystem is mounted on users_dir/<student>
        return self.dir / "users"

    @property
    def images(self) -> Path:
        return self.dir / "images"

    @property
    def socket_dir(self) -> Path:  # the students' servers' unix sockets (spawner.py)
        return self.dir / "sockets"

    @property
    def cgroup_base(self) -> str:
        return f"llmrl-hub-{self.port}"

    def student_home(self, name: str) -> Path:
        return self.users_dir / name / "home"

    def inbound_of(self, name: str) -> Path:
        """A student's own inbound (the exchange's inbound as their server sees it)."""
        return self.users_dir / name / "inbound"

    @property
    def course_dir(self) -> Path:
        return home_of(self.instructor) / COURSE_ID

    @property
    def on_submit_dir(self) -> Path:  # grading on submit (on_submit.py): spool/, results/, course/
        return self.dir / "on-submit"


# ----------------------------------------------------------------------------- accounts

def require_root() -> None:
    if os.geteuid() != 0:
        raise HubError("the hub needs root: it creates OS accounts and starts servers as those users (run it with sudo)")


def home_of(name: str) -> Path:
    try:
        return Path(pwd.getpwnam(name).pw_dir)
    except KeyError:
        return Path("/home") / name


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def read_manifest(directory: Path) -> dict:
    path = directory / "manifest.json"
    if not path.exists():
        return {"users": [], "created_by": "llmrl hub.deploy", "repo": str(REPO)}
    return json.loads(path.read_text())


def write_manifest(cfg: HubConfig, manifest: dict) -> None:
    cfg.dir.mkdir(parents=True, exist_ok=True)
    tmp = cfg.manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(cfg.manifest)


def ensure_user(name: str, role: str, manifest: dict, cfg: HubConfig) -> bool:
    """Create the OS account `name` unless this hub created it before; True when created now. A student's
    home is on their own filesystem (make_student_filesystem), made here too."""
    if user_exists(name):
        if name not in manifest["users"]:
            raise HubError(f"the account {name} exists and was not created by this hub ({cfg.manifest} does not list it): "
                           "choose other names or remove it yourself")
        created = False
    else:
        where = (["--no-create-home", "--home-dir", str(cfg.student_home(name))] if role == "student"
                 else ["--create-home"])
        subprocess.run(["useradd", *where, "--shell", "/bin/bash", "--comment", f"llmrl course hub {role}",
                        name], check=True, capture_output=True, text=True)
        manifest["users"].append(name)
        write_manifest(cfg, manifest)  # recorded at once: an interrupted setup still knows what to remove
        created = True
    if role == "student":
        make_student_filesystem(name, cfg)
    # Debian's useradd leaves homes 0755 here: every account could read every other's files, including
    # nbgrader's cache of the submission secrets (which name the feedback files).
    os.chmod(home_of(name), 0o700)
    return created


def make_student_filesystem(name: str, cfg: HubConfig) -> None:
    """The student's own filesystem (limits.py) mounted on users_dir/<name>, with home/ (theirs, 0700, from
    /etc/skel), tmp/ (theirs, 0700: their /tmp), run/ (theirs, 0700: their server's socket), inbound/ (the
    instructor's, group theirs, 0730: what they hand in) and exchange/ (root's, 1777, with an empty
    llmrl/ of root's: the exchange as their server sees it, confine.py). Idempotent (a remount after a
    reboot keeps everything)."""
    cfg.users_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.users_dir, 0o755)
    cfg.images.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.images, 0o700)
    root = cfg.users_dir / name
    try:
        L.make_user_filesystem(cfg.images / f"{name}.img", root, cfg.limits)
    except L.LimitError as e:
        raise HubError(str(e)) from None
    os.chown(root, 0, 0)
    os.chmod(root, 0o711)
    shutil.rmtree(root / "lost+found", ignore_errors=True)
    pw = pwd.getpwnam(name)
    inst = pwd.getpwnam(cfg.instructor)
    home = cfg.student_home(name)
    if not home.exists():
        shutil.copytree("/etc/skel", home, symlinks=True)
        chown_tree(home, name)
    for folder, owner, group, mode in ((home, pw.pw_uid, pw.pw_gid, 0o700), (root / "tmp", pw.pw_uid, pw.pw_gid, 0o700),
                                       (root / "run", pw.pw_uid, pw.pw_gid, 0o700),
                                       (root / "inbound", inst.pw_uid, pw.pw_gid, 0o2730),
                                       (root / "exchange", 0, 0, 0o1777), (root / "exchange" / COURSE_ID, 0, 0, 0o755)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
        os.chown(folder, owner, group)
        os.chmod(folder, mode)


def set_password(name: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", check=True, capture_output=True, text=True)


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def processes_of(uids: set[int]) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid in uids:
                    found.append(int(p.name))
            except OSError:
                continue
    return found


def end_processes_of(names: list[str], grace_s: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process of these accounts (each by its pid); the pids that were found."""
    uids = {uid_of(n) for n in names if user_exists(n)}
    if not uids:
        return []
    pids = processes_of(uids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and processes_of(uids):
        time.sleep(0.2)
    for pid in processes_of(uids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def run_as(name: str, cmd: list[str], cfg: HubConfig, *, cwd: Path | None = None, timeout: float = 900,
           env: dict | None = None, check: bool = True, confined: bool = False) -> subprocess.CompletedProcess:
    """Run `cmd` as the OS user `name` (its own uid, gid and groups), with the hub's environment.
    confined: as a student's server runs it (confine.py: their cgroups, mount namespace and limits), i.e.
    what the student's terminal or kernel can do."""
    pw = pwd.getpwnam(name)
    full_env = user_environment(cfg, name)
    full_env.update(env or {})
    if confined:
        proc = subprocess.run([sys.executable, str(HERE / "confine.py"), str(cfg.settings), name, "--", *cmd],
                              cwd=cwd or pw.pw_dir, env=full_env, capture_output=True, text=True, timeout=timeout)
    else:
        proc = subprocess.run(cmd, cwd=cwd or pw.pw_dir, env=full_env, user=pw.pw_uid, group=pw.pw_gid,
                              extra_groups=[g.gr_gid for g in grp.getgrall() if name in g.gr_mem],
                              capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise HubError(f"as {name}: {' '.join(cmd[:3])} ... failed (exit {proc.returncode}):\n  " + "\n  ".join(tail))
    return proc


# ----------------------------------------------------------------------------- the Python environment

def env_dir(cfg: HubConfig) -> Path:
    """The environment the hub's users run: .venv itself, or D/env (see python_environment)."""
    settings = json.loads(cfg.settings.read_text()) if cfg.settings.exists() else {}
    return Path(settings.get("env", VENV))


def user_environment(cfg: HubConfig, name: str) -> dict:
    """What a process of the hub's users starts with (servers, the course service, the grader)."""
    pw = pwd.getpwnam(name)
    env_bin = env_dir(cfg) / "bin"
    return {"HOME": pw.pw_dir, "USER": name, "LOGNAME": name, "SHELL": pw.pw_shell or "/bin/bash",
            "PATH": f"{env_bin}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LLMRL_CACHE": str(cfg.cache),
            "PYTHONUNBUFFERED": "1"}


def blocked_path(path: Path, name: str) -> str | None:
    """The first folder on the way to `path` that the account `name` cannot enter, with its mode."""
    pw = pwd.getpwnam(name)
    groups = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if name in g.gr_mem}
    p = Path("/")
    for part in Path(path).parts[1:]:
        st = p.stat()
        mode = st.st_mode
        ok = (mode & stat.S_IXOTH) or (st.st_uid == pw.pw_uid and mode & stat.S_IXUSR) or \
             (st.st_gid in groups and mode & stat.S_IXGRP)
        if not ok:
            return f"{p} (mode {stat.filemode(mode)}, owner {pwd.getpwuid(st.st_uid).pw_name})"
        p = p / part
    return None


def probe_environment(python: Path, name: str, cfg: HubConfig) -> tuple[bool, str]:
    try:
        proc = run_as(name, [str(python), "-c", PROBE], cfg, check=False, timeout=300,
                      env={"PATH": f"{python.parent}:/usr/bin:/bin"})
    except PermissionError as e:
        return False, str(e)
    except OSError as e:
        return False, str(e)
    out = (proc.stderr or proc.stdout or "").strip().splitlines()
    return proc.returncode == 0, (out[-1] if out else f"exit {proc.returncode}")


def python_environment(cfg: HubConfig, probe_user: str) -> Path:
    """The environment the users' servers run in, checked by running it as `probe_user`."""
    python = VENV / "bin" / "python"
    if not python.exists():
        raise HubError(f"{python} is missing: run `make venv` first")
    ok, why = probe_environment(python, probe_user, cfg)
    if ok:
        return VENV
    real = python.resolve()
    blocked = blocked_path(real, probe_user)
    reason = f"{probe_user} cannot run {python} ({why}" + (f"; {real} is behind {blocked}" if blocked else "") + ")"
    # The same interpreter (same patch release: 3.11.2's re module cannot parse soupsieve's selectors,
    # which nbconvert's HTML export needs), copied where everyone can read it.
    base = copy_interpreter(base_prefix_of(python), cfg.dir / "python")
    env = cfg.dir / "env"
    build_thin_environment(base, env)
    ok, why2 = probe_environment(env / "bin" / "python", probe_user, cfg)
    if ok:
        return env
    raise HubError(f"no Python environment the hub's users can run: {reason}; {env} on a copy of the interpreter "
                   f"did not work either ({why2}). Build .venv from a Python every account can read")


def base_prefix_of(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return Path(out)


def copy_interpreter(prefix: Path, dest: Path) -> Path:
    """A copy of the Python installation at `prefix` (interpreter, shared library, standard library; not its
    site-packages) in `dest`; returns the copy's interpreter. A shared-library build looks for
    libpython under the original prefix (its RUNPATH): the copy's is pointed at its own lib/."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    exe = prefix / "bin" / version
    if not exe.is_file():
        raise HubError(f"no {exe}: cannot copy the interpreter of {VENV}")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "bin").mkdir(parents=True)
    (dest / "lib").mkdir()
    shutil.copy2(exe, dest / "bin" / version)
    for alias in ("python3", "python"):
        (dest / "bin" / alias).symlink_to(version)
    for lib in (prefix / "lib").glob("libpython*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    shutil.copytree(prefix / "lib" / version, dest / "lib" / version, symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages", "test", "idle_test"))
    (dest / "lib" / version / "site-packages").mkdir()
    old = str(prefix / "lib").encode() + b"\0"
    data = (dest / "bin" / version).read_bytes()
    if data.count(old) == 1:
        new = b"$ORIGIN/../lib"
        if len(new) + 1 > len(old):
            raise HubError(f"cannot point the copied interpreter at its own library ({prefix} is too short a path)")
        (dest / "bin" / version).write_bytes(data.replace(old, new + b"\0" * (len(old) - len(new))))
    elif data.count(old) > 1:
        raise HubError(f"{exe} names {prefix / 'lib'} more than once: cannot relocate a copy of it")
    make_world_readable(dest)
    return dest / "bin" / version


def make_world_readable(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            mode = p.stat().st_mode
            p.chmod(mode | stat.S_IROTH | stat.S_IRGRP | (stat.S_IXOTH | stat.S_IXGRP if p.is_dir() or mode & stat.S_IXUSR else 0))


def build_thin_environment(base: Path, env: Path) -> None:
    """A virtual environment on `base` that uses .venv's installed packages and jupyter files."""
    if env.exists():
        shutil.rmtree(env)
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True, text=True)
    site_dirs = sorted((VENV / "lib").glob("python3.*/site-packages"))
    if not site_dirs:
        raise HubError(f"no site-packages in {VENV}")
    target = next((env / "lib").glob("python3.*/site-packages"))
    # addsitedir also runs .venv's own .pth files (the editable install of the course library). Not
    # named llmrl*: the answer kernel's sandbox masks every such file as a copy of the library.
    (target / "course-hub-env.pth").write_text(f"import site; site.addsitedir({str(site_dirs[0])!r})\n")
    for sub in ("share", "etc"):  # jupyter data (lab extensions, kernels) and server extension config
        if (VENV / sub).exists():
            (env / sub).symlink_to(VENV / sub)
    # console scripts (jupyter, nbgrader, alembic ...) with this environment's interpreter
    python_line = f"#!{env / 'bin' / 'python'}\n"
    for script in sorted((VENV / "bin").iterdir()):
        dest = env / "bin" / script.name
        if dest.exists() or not script.is_file():
            continue
        try:
            with open(script, "rb") as f:
                first = f.readline()
            if not (first.startswith(b"#!") and b"python" in first):
                continue
            body = script.read_text().split("\n", 1)[1]
        except (OSError, UnicodeDecodeError, IndexError):
            continue
        dest.write_text(python_line + body)
        dest.chmod(0o755)
    make_world_readable(env)


# ----------------------------------------------------------------------------- folders and configuration

def assignments_of(cfg: HubConfig) -> list[str]:
    found = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if cfg.assignments is None:
        return found
    unknown = [a for a in cfg.assignments if a not in found]
    if unknown:
        raise HubError(f"unknown assignment(s) {', '.join(unknown)} (source/ has {', '.join(found)})")
    return list(cfg.assignments)


def chown_tree(path: Path, name: str) -> None:
    pw = pwd.getpwnam(name)
    for p in [path, *path.rglob("*")]:
        os.lchown(p, pw.pw_uid, pw.pw_gid)


def make_exchange(cfg: HubConfig) -> None:
    """The exchange and the course's folder in it, owned by the instructor from the start: in the exchange
    (1777, as nbgrader requires, sticky: no account can rename or delete what another made) a student who
    created the course's folder first would make every release fail. Anything already there that is not
    the instructor's folder is moved aside (and named in the log), never used."""
    cfg.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(cfg.exchange, 0, 0)
    os.chmod(cfg.exchange, 0o1777)
    inst = pwd.getpwnam(cfg.instructor)
    course = cfg.exchange / COURSE_ID
    if os.path.lexists(course):
        st = os.lstat(course)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != inst.pw_uid:
            aside = cfg.exchange / f".{COURSE_ID}.not-the-instructors.{int(time.time())}"
            os.rename(course, aside)
            print(f"exchange: {course} was not the instructor's folder (owner uid {st.st_uid}); moved to {aside}")
    # (folder, mode): inbound is the instructor's alone; each student's server has their own in its place
    for folder, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o700),
                         (course / "feedback", 0o711)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
        os.chown(folder, inst.pw_uid, inst.pw_gid)
        os.chmod(folder, mode)


def make_cache(cfg: HubConfig) -> None:
    """The model cache, copied from this machine's (if any) and completed by the instructor."""
    cfg.cache.mkdir(parents=True, exist_ok=True)
    source = Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl")
    if source.is_dir() and source.resolve() != cfg.cache.resolve():
        for f in source.iterdir():
            if f.is_file() and not f.is_symlink() and not (cfg.cache / f.name).exists():
                shutil.copyfile(f, cfg.cache / f.name)
    chown_tree(cfg.cache, cfg.instructor)
    for p in [cfg.cache, *cfg.cache.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    # builds whatever is missing (python -m llmrl.tools.cache), as the instructor: students only read it
    run_as(cfg.instructor, [str(env_dir(cfg) / "bin" / "python"), "-m", "llmrl.tools.cache"], cfg, timeout=1800)


def make_course(cfg: HubConfig, assignments: list[str]) -> None:
    """The instructor's course folder: source/ and the grader from this repository, the rest kept."""
    course = cfg.course_dir
    course.mkdir(mode=0o700, exist_ok=True)
    ignore = shutil.ignore_patterns("artifacts", ".ipynb_checkpoints", "__pycache__")
    for a in assignments:
        target = course / "source" / a
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(REPO / "source" / a, target, ignore=ignore)
    grader = course / "autograder"
    if grader.exists():
        shutil.rmtree(grader)
    shutil.copytree(REPO / "autograder", grader, ignore=shutil.ignore_patterns(*GRADER_LEFT_OUT))
    shutil.copy2(HERE / "course_tool.py", course / "course_tool.py")
    env = env_dir(cfg)
    write_json(course / "course_tool.json", {
        # what the batch grader's processes must not see (course_tool.py), and what they need from it
        "hide": [str(cfg.exchange), str(REPO), str(cfg.on_submit_dir / "spool")],
        "show": sorted({str(VENV), str(REPO / "lib"), str(env)}),
        "writable": [str(cfg.cache)],
        "on_submit_results": str(cfg.on_submit_dir / "results"),  # read by on-submit-grades, accept-on-submit
    })
    (course / "nbgrader_config.py").write_text(
        "# The course's nbgrader settings (written by hub/deploy.py): the grader's, with the hub's exchange.\n"
        'load_subconfig("autograder/nbgrader_config.py")  # noqa: F821\n'
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {str(cfg.exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        "# each student hands in through their own inbound, on their own filesystem (hub/limits.py)\n"
        f"c.CourseCollect.student_inbounds = {str(cfg.users_dir / '{student}' / 'inbound')!r}\n")
    (course / "README.txt").write_text(
        "The llmrl course folder (nbgrader's course directory), owned by the instructor and readable by no one else.\n"
        "source/, autograder/, course_tool.py and nbgrader_config.py are copied from the course repository by\n"
        "`make hub`: edit the labs there (notebooks/*.py, then make build execute), not here.\n"
        "release/ is generated here; submitted/ is filled by the formgrader's Collect; autograded/, feedback/,\n"
        "gradebook.db and the CSV files by `python course_tool.py autograde ASSIGNMENT` (the batch grader).\n")
    chown_tree(course, cfg.instructor)
    os.chmod(course, 0o700)
    run_as(cfg.instructor, [str(env_dir(cfg) / "bin" / "python"), "course_tool.py", "prepare", *assignments,
                            "--students", ",".join(cfg.students)], cfg, cwd=course, timeout=900)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def write_jupyter_configs(cfg: HubConfig) -> None:
    """What the students' servers and the course service load besides the environment's own config."""
    nbgrader_users = ("# nbgrader settings of the students' servers (written by hub/deploy.py)\n"
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
        "service_config": str(cfg.service_config), "templates": str(HERE / "templates"),
        "grader": cfg.grader,
        "on_submit": {"dir": str(cfg.on_submit_dir), "poll_s": 2.0, "rate_per_hour": cfg.on_submit_rate,
                      "workers": cfg.on_submit_workers or on_submit.default_workers()},
    }
    write_json(cfg.settings, settings)
    cfg.settings.chmod(0o644)


def cgroups_of(cfg: HubConfig) -> L.Cgroups:
    try:
        return L.Cgroups(cfg.cgroup_base)
    except L.LimitError as e:
        raise HubError(str(e)) from None


def load_passwords(cfg: HubConfig) -> dict[str, str]:
    path = cfg.state / "passwords.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_passwords(cfg: HubConfig, passwords: dict[str, str]) -> None:
    cfg.state.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state, 0o700)
    path = cfg.state / "passwords.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(passwords, f, indent=1)


def setup(cfg: HubConfig, passwords: dict[str, str] | None = None, log=print) -> dict[str, str]:
    """Make (or bring up to date) everything the hub needs; returns account -> password."""
    require_root()
    if not PROXY.exists():
        raise HubError(f"{PROXY} is missing: run `make hub-install` (npm ci in hub/)")
    assignments = assignments_of(cfg)
    manifest = read_manifest(cfg.dir)
    cfg.dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.dir, 0o755)
    write_manifest(cfg, manifest)
    known = load_passwords(cfg)
    wanted = dict(passwords or {})
    t0 = time.monotonic()
    cgroups_of(cfg)  # the machine must provide them (limits.py): said now, before any account is made
    check_disk(cfg)
    ensure_user(cfg.grader, "grader", manifest, cfg)  # no password: it never logs in
    for name, role in [(cfg.instructor, "instructor")] + [(s, "student") for s in cfg.students]:
        created = ensure_user(name, role, manifest, cfg)
        pw = wanted.get(name) or (None if not created and name in known else secrets.token_urlsafe(12))
        if pw is not None:
            set_password(name, pw)
            known[name] = pw
    save_passwords(cfg, known)
    log(f"accounts: {cfg.instructor} (instructor), {', '.join(cfg.students)} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    env = python_environment(cfg, cfg.students[0])
    write_settings(cfg, env)
    log(f"environment: {env} ({time.monotonic() - t0:.1f} s)")
    write_jupyter_configs(cfg)
    protect_repository(manifest, cfg, log)
    make_exchange(cfg)
    t0 = time.monotonic()
    make_cache(cfg)
    log(f"model cache: {cfg.cache} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    make_course(cfg, assignments)
    log(f"course folder: {cfg.course_dir} with {', '.join(assignments)} ({time.monotonic() - t0:.1f} s)")
    on_submit.prepare(cfg.settings)
    return {n: known[n] for n in [cfg.instructor, *cfg.students]}


def check_disk(cfg: HubConfig) -> None:
    """The students' filesystems are sparse files: they take what the students write, up to their size. All
    of them full must still fit on the disk that holds them, or one class could fill the machine's disk."""
    cfg.dir.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(cfg.dir)
    free = st.f_bavail * st.f_frsize
    have = sum((cfg.images / f"{n}.img").stat().st_blocks * 512 for n in cfg.students
               if (cfg.images / f"{n}.img").exists())
    need = len(cfg.students) * cfg.limits.disk_bytes - have
    if need > free:
        raise HubError(f"{len(cfg.students)} students x {cfg.limits.disk_bytes >> 20} MiB of disk each need up to "
                       f"{need >> 20} MiB more on {cfg.dir}'s disk, which has {free >> 20} MiB free: give each less "
                       "(--disk-mib) or put the hub's folder on a larger disk")


# The parts of this repository that hold solutions, hidden tests or grades: no hub account may read them
# (the accounts need only .venv and lib/, the environment and the course library).
INSTRUCTOR_ONLY = ("source", "notebooks", "autograder", "artifacts", ".git", "submitted", "autograded", "feedback",
                   "gradebook.db", "grades.csv", "batch_grades.csv", "collected")


def protect_repository(manifest: dict, cfg: HubConfig, log=print) -> list[str]:
    """Take read and search access for "other" off the repository's instructor-only entries (root and the
    repository's owner keep theirs); the old modes go into the manifest so that `remove` puts them back."""
    changed = []
    saved = manifest.setdefault("repo_modes", {})
    for name in INSTRUCTOR_ONLY:
        path = REPO / name
        if not path.exists() or path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o007:
            saved.setdefault(str(path), mode)
            path.chmod(mode & ~0o007)
            changed.append(name)
    write_manifest(cfg, manifest)
    if changed:
        log(f"repository: {', '.join(changed)} no longer readable by other accounts (restored by `make hub-remove`)")
    return changed


def restore_repository(manifest: dict) -> None:
    for path, mode in manifest.get("repo_modes", {}).items():
        p = Path(path)
        if p.exists() and not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o007 | (mode & 0o007))


# ----------------------------------------------------------------------------- running it

def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _die_with_parent() -> None:
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _hub_preexec(die_with_parent: bool):
    def run():
        # the hub and its proxy hold a few descriptors per running server: the hard limit, not 1024
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
        if die_with_parent:
            _die_with_parent()
    return run


class RunningHub:
    """A jupyterhub process started by :func:`start`; :meth:`stop` ends it and everything it started."""

    def __init__(self, cfg: HubConfig, proc: subprocess.Popen, log_path: Path):
        self.cfg, self.proc, self.log_path = cfg, proc, log_path
        self.url = cfg.url

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM the hub (it stops the proxy, the course service and the users' servers), then end by pid
        whatever of the hub's accounts is still running; returns those pids."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        left = end_processes_of([self.cfg.instructor, *self.cfg.students, self.cfg.grader])
        _stop_proxy_left_over(self.cfg)
        return left


def _stop_proxy_left_over(cfg: HubConfig) -> None:
    """The proxy runs in a session of its own; the hub stops it, this catches one left by a killed hub."""
    pid_file = cfg.state / "proxy.pid"
    for path in (pid_file, cfg.state / "jupyterhub-proxy.pid"):
        if path.exists():
            try:
                pid = int(path.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"configurable-http-proxy" in cmdline:
                    os.kill(pid, signal.SIGTERM)
            except (ValueError, OSError):
                pass


def start(cfg: HubConfig, driver_token: str | None = None, timeout: float = 180.0,
          die_with_parent: bool = False) -> RunningHub:
    """Start jupyterhub (set up before) and wait until its API answers."""
    require_root()
    # No student process may outlive the hub: a process left from before (it could hold a port of the hub's)
    # is ended, and the students' filesystems are mounted again (after a reboot).
    end_processes_of(cfg.students)
    cg = cgroups_of(cfg)
    for name in cfg.students:
        cg.kill(name)
        make_student_filesystem(name, cfg)
    try:
        cg.setup(cfg.limits)
    except L.LimitError as e:
        raise HubError(str(e)) from None
    busy = [p for p in (cfg.port, cfg.proxy_api_port, cfg.hub_port, cfg.service_port) if not port_free(p)]
    if busy:
        raise HubError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use: is a hub already running? "
                       f"(choose others with PORT=)")
    cfg.state.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state, 0o700)
    log_path = cfg.state / "jupyterhub.log"
    env = {"PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(cfg.state),
           "LLMRL_HUB_SETTINGS": str(cfg.settings), "PYTHONUNBUFFERED": "1",
           "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(32)}
    if driver_token:
        env["LLMRL_HUB_DRIVER_TOKEN"] = driver_token
    cmd = [str(VENV / "bin" / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=cfg.state, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_hub_preexec(die_with_parent))
    hub = RunningHub(cfg, proc, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise HubError(f"jupyterhub exited with {proc.returncode} at start; its log ends:\n{hub.log_tail()}")
        try:
            with urllib.request.urlopen(f"{cfg.url}/hub/api/", timeout=5) as r:
                if r.status == 200:
                    return hub
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            hub.stop()
            raise HubError(f"jupyterhub did not answer {cfg.url}/hub/api/ in {timeout:.0f} s; its log ends:\n"
                           f"{hub.log_tail()}")
        time.sleep(0.5)


def remove(directory: Path, log=print) -> list[str]:
    """Stop the hub of `directory`, delete the accounts it created (with their homes) and the folder."""
    require_root()
    directory = Path(directory).resolve()
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        if directory.exists():
            raise HubError(f"{directory} has no manifest.json: not a folder made by hub/deploy.py, left as it is")
        return []
    manifest = json.loads(manifest_path.read_text())
    pid_file = directory / "state" / "jupyterhub.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().strip())
            if b"jupyterhub" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 30
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.2)
        except (ValueError, OSError):
            pass
    users = [u for u in manifest.get("users", []) if NAME_RE.match(u)]
    end_processes_of(users)
    settings_path = directory / "hub.json"
    if settings_path.exists():
        settings = json.loads(settings_path.read_text())
        if settings.get("cgroups"):
            try:
                L.Cgroups(**settings["cgroups"]).remove()
            except (L.LimitError, OSError) as e:
                log(f"cgroups not removed: {e}")
    users_dir = directory / "users"
    if users_dir.is_dir():
        for mnt in users_dir.iterdir():
            L.unmount(mnt)
    restore_repository(manifest)
    removed = []
    for name in users:
        if user_exists(name):
            home = home_of(name)
            proc = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
            if proc.returncode not in (0, 12):  # 12: the home could not be removed (reported below)
                raise HubError(f"userdel {name} failed: {proc.stderr.strip()}")
            if home.exists() and home == Path("/home") / name:
                shutil.rmtree(home, ignore_errors=True)
            removed.append(name)
    shutil.rmtree(directory)
    log(f"removed {', '.join(removed) or 'no accounts'} and {directory}")
    return removed


def config_from_args(args) -> HubConfig:
    students = [s.strip() for s in args.students.split(",") if s.strip()] if args.students else None
    kw = dict(dir=Path(args.dir), port=args.port)
    if args.instructor:
        kw["instructor"] = args.instructor
    if students:
        kw["students"] = students
    lim = L.Limits()
    for opt, attr in (("memory_mib", "memory_bytes"), ("disk_mib", "disk_bytes")):
        if getattr(args, opt):
            setattr(lim, attr, getattr(args, opt) * L.MiB)
    if args.processes:
        lim.processes = args.processes
    kw["limits"] = lim
    if args.assignments:
        kw["assignments"] = [a for a in args.assignments.split(",") if a]
    kw["on_submit_workers"], kw["on_submit_rate"] = args.on_submit_workers, args.on_submit_rate
    return HubConfig(**kw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.deploy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["up", "setup", "remove"])
    p.add_argument("--dir", default=str(DEFAULT_DIR), help=f"the hub's folder (default {DEFAULT_DIR})")
    p.add_argument("--instructor", default=None, help="the instructor's account (default llmrl-instructor)")
    p.add_argument("--students", default=None, help="students' accounts, comma separated (default llmrl-s1,llmrl-s2,llmrl-s3)")
    p.add_argument("--port", type=int, default=8500, help="public port; the next three are the hub's own (default 8500)")
    p.add_argument("--memory-mib", type=int, default=None, help="memory of each student's server and its kernels "
                   f"(default {L.Limits().memory_bytes >> 20})")
    p.add_argument("--processes", type=int, default=None, help=f"processes and threads of each student "
                   f"(default {L.Limits().processes})")
    p.add_argument("--disk-mib", type=int, default=None, help="each student's filesystem: home, /tmp and submissions "
                   f"(default {L.Limits().disk_bytes >> 20})")
    p.add_argument("--assignments", default=None, help="comma separated (default: every assignment in source/)")
    p.add_argument("--on-submit-workers", type=int, default=0, help="gradings on submit at once (default: one per "
                   "free core)")
    p.add_argument("--on-submit-rate", type=int, default=10, help="gradings on submit of one student in an hour, at "
                   "most (default 10)")
    args = p.parse_args(argv)
    try:
        if args.command == "remove":
            remove(Path(args.dir))
            return 0
        cfg = config_from_args(args)
        passwords = setup(cfg)
        if args.command == "setup":
            print(f"set up in {cfg.dir}; passwords in {cfg.state / 'passwords.json'}")
            return 0
        hub = start(cfg)
        print(f"\nJupyterHub for the course: {cfg.url}  (log: {hub.log_path})")
        print("accounts (password):")
        for name, pw in passwords.items():
            print(f"  {name:24s} {pw}{'   instructor: formgrader at ' + cfg.url + '/services/' + COURSE_ID + '/formgrader' if name == cfg.instructor else ''}")
        print(f"course folder: {cfg.course_dir}   exchange: {cfg.exchange}")
        print("Ctrl-C stops the hub (accounts and grades stay; `make hub-remove` deletes them).")
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        try:
            while hub.alive() and not stop:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        hub.stop()
        if not stop and hub.proc.returncode not in (None, 0, -signal.SIGTERM):
            print(f"jupyterhub stopped with {hub.proc.returncode}; its log ends:\n{hub.log_tail()}", file=sys.stderr)
            return 1
        print("hub stopped")
        return 0
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
