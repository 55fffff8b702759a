"""How many students' servers fit in a machine's memory: start N real servers on a hub and measure (root).

    .venv/bin/python -m hub.capacity --servers 40 [--dir /srv/llmrl-hub-test] [--port 8560] [--json FILE]

It sets up a hub of its own (accounts llmrl-t-c001 ... and llmrl-t-cinst, each student with their
filesystem and limits, as `make hub` makes them), starts it, then starts every student's JupyterLab
through the hub's REST API (a few at a time) and waits until all are ready at once. Measured:

- the machine's MemAvailable before the first server and with all of them running: the drop divided
  by N is what one more idle server costs the machine (its processes, page tables, the kernel's
  memory for its sockets, the hub's and the proxy's share);
- each student's cgroup: memory charged (anonymous and page cache) and the server's proportional set
  size (PSS: shared pages split between the processes that map them);
- the hub's and the proxy's resident memory.

From these it says how many idle servers fit in 24 GiB (and in this machine's memory). Everything it
made is removed at the end (hub.deploy remove). A kernel is not started: a student who runs a notebook
adds the kernel's memory (torch's import alone is about 250 MB), which the same report estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hub import deploy
from hub import limits as L

GiB = 1 << 30


def meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":")
        out[k] = int(v.split()[0]) * 1024
    return out


def pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class API:
    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def call(self, method: str, path: str, timeout: float = 60):
        req = urllib.request.Request(self.url + path, method=method, headers={"Authorization": f"token {self.token}"},
                                     data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body.strip() else None


def start_server(api: API, name: str, timeout: float = 600) -> float:
    t0 = time.monotonic()
    try:
        api.call("POST", f"/hub/api/users/{name}/server", timeout=120)
    except urllib.error.HTTPError as e:
        if e.code != 400:
            raise
    while True:
        server = (api.call("GET", f"/hub/api/users/{name}")["servers"] or {}).get("")
        if server and server.get("ready"):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{name}'s server was not ready in {timeout:.0f} s")
        time.sleep(1.0)


def measure(n: int, directory: Path, port: int, concurrency: int, limits: L.Limits, log=print) -> dict:
    students = [f"llmrl-t-c{i:03d}" for i in range(1, n + 1)]
    cfg = deploy.HubConfig(dir=directory, instructor="llmrl-t-cinst", students=students, port=port,
                           assignments=["lab11"], limits=limits)
    report = {"servers": n, "machine_memory": meminfo()["MemTotal"], "limits": limits.as_dict(),
              "cgroups": L.describe(), "load_average_start": os.getloadavg()}
    deploy.remove(directory, log=lambda m: log(f"left over: {m}"))
    hub = None
    try:
        t0 = time.monotonic()
        deploy.setup(cfg, log=lambda m: log(f"setup: {m}"))
        report["setup_s"] = round(time.monotonic() - t0, 1)
        token = secrets.token_hex(32)
        hub = deploy.start(cfg, driver_token=token)
        api = API(cfg.url, token)
        time.sleep(20)  # the course service (formgrader) starts with the hub: let it settle
        before = meminfo()["MemAvailable"]
        t0 = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            starts = list(pool.map(lambda s: start_server(api, s), students))
        report["all_ready_s"] = round(time.monotonic() - t0, 1)
        report["start_s"] = {"min": round(min(starts), 1), "max": round(max(starts), 1),
                             "mean": round(sum(starts) / n, 1)}
        running = [s for s in students if (api.call("GET", f"/hub/api/users/{s}")["servers"] or {}).get("", {})
                   .get("ready")]
        report["running_at_once"] = len(running)
        time.sleep(30)  # settle: start-up garbage freed, lazy imports done
        after = meminfo()["MemAvailable"]
        cg = L.Cgroups(**json.loads(cfg.settings.read_text())["cgroups"])
        usage = [cg.memory_usage(s) for s in students]
        server_pss = [sum(pss(p) for p in cg.pids(s)) for s in students]
        hub_pids = [hub.proc.pid]
        proxy = cfg.state / "proxy.pid"
        if proxy.exists():
            hub_pids.append(int(proxy.read_text().strip()))
        report.update({
            "mem_available_drop": before - after,
            "per_server_machine": (before - after) / n,
            "cgroup_current_mean": sum(u["current"] for u in usage) / n,
            "cgroup_anon_mean": sum(u["anon"] for u in usage) / n,
            "server_pss_mean": sum(server_pss) / n,
            "server_pss_max": max(server_pss),
            "hub_and_proxy_rss": sum(rss(p) for p in hub_pids),
            "load_average_end": os.getloadavg(),
        })
        per = report["per_server_machine"]
        base = report["machine_memory"] - before  # what the machine used before the first server
        report["fit_in_24GiB"] = int((24 * GiB - base) // per)
        report["fit_in_this_machine"] = int((report["machine_memory"] - base) // per)
        report["base_used_before_servers"] = base
        return report
    finally:
        if hub is not None:
            hub.stop()
        deploy.remove(directory, log=lambda m: log(f"removed: {m}"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", type=int, required=True)
    p.add_argument("--dir", default="/srv/llmrl-hub-test")
    p.add_argument("--port", type=int, default=8560)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--disk-mib", type=int, default=256)
    p.add_argument("--json", default=None, help="write the report here too")
    args = p.parse_args(argv)
    deploy.require_root()
    lim = L.Limits(disk_bytes=args.disk_mib * L.MiB, disk_inodes=20_000)
    report = measure(args.servers, Path(args.dir), args.port, args.concurrency, lim)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    mib = 1 << 20
    print(f"\n{report['running_at_once']} of {args.servers} servers running at once; each costs the machine "
          f"{report['per_server_machine'] / mib:.0f} MiB (cgroup {report['cgroup_current_mean'] / mib:.0f} MiB, "
          f"PSS {report['server_pss_mean'] / mib:.0f} MiB); {report['fit_in_24GiB']} fit in 24 GiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
