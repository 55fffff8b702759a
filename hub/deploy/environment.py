"""The Python environment the users' servers run in. This repository's .venv is used when every account
can run it (checked as a student: PROBE); when its interpreter sits somewhere they cannot enter (a pyenv
Python under /root, mode 0700), D/python is a copy of that interpreter (the same release: Debian's 3.11.2
cannot run nbconvert's HTML export) and D/env a small environment on it that adds .venv's packages (no
second install), with .venv's jupyter data (extensions, kernels) and console scripts."""

from __future__ import annotations

import grp
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from hub.deploy.accounts import run_as
from hub.deploy.config import VENV, HubConfig, HubError

# What a user's server imports (and nbconvert's HTML export, which needs a re module without 3.11.2's
# possessive-quantifier bugs): if this runs as a student, the environment is usable.
PROBE = ("import llmrl, nbgrader, jupyterhub, jupyterlab, torch, soupsieve; soupsieve.compile('img:not([alt])'); "
         "print(llmrl.__file__)")


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
    except OSError as e:  # PermissionError included
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
    _point_at_own_library(dest / "bin" / version, prefix)
    make_world_readable(dest)
    return dest / "bin" / version


def _point_at_own_library(exe: Path, prefix: Path) -> None:
    """The copied interpreter's RUNPATH, `prefix`/lib, rewritten in place as $ORIGIN/../lib (padded)."""
    old = str(prefix / "lib").encode() + b"\0"
    data = exe.read_bytes()
    if data.count(old) == 1:
        new = b"$ORIGIN/../lib"
        if len(new) + 1 > len(old):
            raise HubError(f"cannot point the copied interpreter at its own library ({prefix} is too short a path)")
        exe.write_bytes(data.replace(old, new + b"\0" * (len(old) - len(new))))
    elif data.count(old) > 1:
        raise HubError(f"{prefix / 'bin' / exe.name} names {prefix / 'lib'} more than once: cannot relocate a copy "
                       "of it")


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
    _copy_console_scripts(env)
    make_world_readable(env)


def _copy_console_scripts(env: Path) -> None:
    """.venv's console scripts (jupyter, nbgrader, alembic ...) in `env`, with its interpreter."""
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
