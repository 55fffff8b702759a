"""`python -m hub.on_submit serve SETTINGS` (the hub's service, root's) and `queue SETTINGS` (print it)."""

from __future__ import annotations

import argparse
import fcntl
import signal
import sys
from pathlib import Path

import hub.on_submit
from hub import processes
from hub.on_submit.queue import Queue
from hub.on_submit.service import Service
from hub.on_submit.settings import Settings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.on_submit", description=hub.on_submit.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ps = sub.add_parser("serve", help="the hub's service (root)")
    ps.add_argument("settings")
    pq = sub.add_parser("queue", help="print the queue (root)")
    pq.add_argument("settings")
    args = p.parse_args(argv)
    s = Settings.read(Path(args.settings))
    if args.command == "queue":
        for r in Queue(s.queue_file).rows():
            print(f"{r['id']:>5} {r['state']:<9} {r['student']:<20} {r['assignment']:<8} {r['submitted_at']:<32} "
                  f"{r['message']}")
        return 0
    processes.die_with_parent()  # the service ends with the hub that started it
    # one service per queue: a hub restarted while the last one still stops waits for it
    lock = open(s.state / "on-submit.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    service = Service(s)
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    service.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
