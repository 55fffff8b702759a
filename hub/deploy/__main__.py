"""The command line: `python -m hub.deploy up|setup|remove` (the package's docstring says what each does)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

import hub.deploy
from hub import limits as L
from hub.deploy.config import COURSE_ID, DEFAULT_DIR, HubConfig, HubError
from hub.deploy.provision import remove, setup
from hub.deploy.running import RunningHub, start


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hub.deploy", description=hub.deploy.__doc__,
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
    return p


def serve(cfg: HubConfig, hub: RunningHub, passwords: dict[str, str]) -> int:
    """`up` once the hub answers: say where it is and who may log in, run until Ctrl-C or SIGTERM, stop it."""
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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "remove":
            remove(Path(args.dir))
            return 0
        cfg = config_from_args(args)
        passwords = setup(cfg)
        if args.command == "setup":
            print(f"set up in {cfg.dir}; passwords in {cfg.state / 'passwords.json'}")
            return 0
        return serve(cfg, start(cfg), passwords)
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
