"""Grading past one machine: the class split into shards, each graded by the batch on a Dask worker.

    autograder/bin/batch [ASSIGNMENT ...] --dask tcp://SCHEDULER:8786 [--shards N] [--workers N] [--retries N]
    autograder/bin/batch [ASSIGNMENT ...] --dask local:4        four worker processes on this machine
    make grade-cluster DASK=tcp://SCHEDULER:8786                  (DASK=local:N the same on one machine)

This machine (the instructor's, with the course folder) finds the submissions as the batch does,
reuses the records of unchanged ones (.grading/), splits the rest into shards (default: one per
worker) and sends each shard to a worker of the Dask cluster as plain data: the assignments'
source/ folders, the course's nbgrader_config.py, the due dates from gradebook.db, the shard's
submitted notebooks and their nbgrader side files. No shared file system is needed.

A worker (grade_shard) writes them into a scratch course folder of its own and runs the batch
itself there (autograder/batch/run.py run_batch): its sandbox check, the model cache, the import
probe and the self-check of the reference solutions on that machine, then every submission of the
shard in the sandbox. It sends back each submission's report, autograded notebook and feedback page
(compressed), and removes its scratch course. A worker refuses a shard when its grader is not the
same as this machine's (grader_version: the same course image everywhere), and grades one shard
at a time however many threads it has.

Here, as each shard comes back, its results are stored as records and merged into the one
gradebook.db by this process alone, with the batch's own merge (run.merge_one: the backup, each
student's rows checked before and after, autograded/, feedback/); the batch table is rewritten
after every shard, grades.csv at the end. Each (assignment, student) is merged at most once, and
only from a shard that finished: nothing is doubled. A shard whose worker died is sent again, up to
--retries times (Dask may also have run it again by itself: the workers' start events count every
run), and its students are marked failed, with the reason, once that is spent; a shard that a
worker refused (no sandbox there, the self-check failed, another grader version) is not retried.
A run that was stopped is continued by running it again: merged students are reused from their
records.

`--dask local[:N]` starts a distributed.LocalCluster of N single-threaded worker processes here (the
tests use it); a cluster of machines is any Dask scheduler: `dask scheduler` with `dask worker`
on each machine, dask-jobqueue (SLURM, PBS, SGE, LSF) or dask-kubernetes (docs/instructors.md).
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from autograder.batch import run as batch
from autograder.batch.gradebook_merge import backup_gradebook, course_duedates, prepare_gradebook, save_record
from autograder.batch.jobs import Job, Result, find_jobs, grader_version
from autograder.course.layout import COPY_IGNORE, PipelineError, ROOT
from autograder.sandbox import safe_files as files

EVENTS = "llmrl-grading-shards"  # the topic of the workers' "shard started" events on the scheduler
MAX_FILE = 256 << 20
_ONE_SHARD = threading.Lock()    # a worker with several threads still grades one shard at a time


@dataclass
class Shard:
    number: int
    jobs: list[int]                      # indices into the driver's job list
    attempts: int = 0
    hosts: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # why each earlier attempt came to nothing


# ----------------------------------------------------------------------------- on a worker

def grade_shard(payload: dict) -> dict:
    """Grade one shard with the batch in a scratch course of this worker's; returns what it graded."""
    with _ONE_SHARD:
        _started(payload)
        mine = grader_version()
        if mine != payload["grader"]:
            raise PipelineError(f"worker {socket.gethostname()} runs grader {mine}, the instructor's machine "
                                f"{payload['grader']}: install the same version of the course on every worker")
        root = files.scratch_dir("shard")
        try:
            for rel, data in payload["files"].items():
                _write(root, rel, zlib.decompress(data))
            if payload["due"]:
                from nbgrader.api import Gradebook

                with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
                    for a, due in payload["due"].items():
                        gb.update_or_create_assignment(a, duedate=due)
            done = batch.run_batch(payload["assignments"], root, root / "submitted", workers=payload["graders"],
                                   csv_path=None, progress=False, regrade=True, no_sandbox=payload["no_sandbox"])
            results = []
            for r in done["results"]:
                out = {}
                if r.report is not None and r.out is not None and r.out.is_dir():
                    out = {p.name: zlib.compress(files.read_regular(p, MAX_FILE), 6) for p in sorted(r.out.iterdir())
                           if p.suffix in (".ipynb", ".html") and files.is_regular(p)}
                results.append({"assignment": r.job.assignment, "student": r.job.student, "report": r.report,
                                "error": r.error, "seconds": r.seconds, "files": out})
            return {"shard": payload["shard"], "results": results, "host": socket.gethostname(), "pid": os.getpid(),
                    "wall_s": done["wall_s"], "cpu_s": done["cpu_s"]}
        finally:
            files.rmtree(root)


def _started(payload: dict) -> None:
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not on a Dask worker (called directly)
        return
    worker.log_event(EVENTS, {"run": payload["run"], "shard": payload["shard"], "attempt": payload["attempt"],
                              "worker": worker.address, "pid": os.getpid()})


def _write(root: Path, rel: str, data: bytes) -> None:
    parts = Path(rel).parts
    if Path(rel).is_absolute() or not parts or any(p in ("", ".", "..") for p in parts):
        raise PipelineError(f"a shard named the file {rel!r}, which is not a plain relative path")
    files.atomic_write_bytes(root.joinpath(*parts), data)


# ----------------------------------------------------------------------------- on the instructor's machine

def connect(address: str, graders: int | None = None):
    """(client, close, graders per shard) for --dask ADDRESS: a scheduler's address, or local[:N]."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise PipelineError("--dask needs dask and distributed (the dev extra: make venv, or pip install -e "
                            "'.[dev]')") from None
    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2] or str(max(1, (os.cpu_count() or 1) // 2))
        if not count.isdigit() or int(count) < 1:
            raise PipelineError(f"--dask {address!r}: expected local or local:N with N a number of workers (1 or more)")
        n = int(count)
        # the driver resends a shard whose worker died, and says so: the scheduler does not retry by itself
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=0,
                                   dashboard_address=None)
        client = Client(cluster)

        def close():
            client.close()
            cluster.close()
        return client, close, graders or max(1, (os.cpu_count() or 1) // n)
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError, ValueError) as e:
        raise PipelineError(f"cannot reach the Dask scheduler at {address} ({type(e).__name__}: "
                            f"{str(e).strip()[:200]}); is `dask scheduler` running there?") from None
    return client, client.close, graders


def run_on_cluster(assignments: list[str], root: Path, address: str, submitted: Path | None = None,
                   shards: int | None = None, graders: int | None = None, csv_path: Path | None = None,
                   progress: bool = True, regrade: bool = False, no_sandbox: bool = False, retries: int = 2) -> dict:
    """`autograder/bin/batch --dask ADDRESS`: grade_on_cluster with a client of its own."""
    client, close, graders = connect(address, graders)
    try:
        return grade_on_cluster(client, assignments, root, submitted, shards, graders, csv_path, progress, regrade,
                                no_sandbox, retries, address=address)
    finally:
        close()


def grade_on_cluster(client, assignments: list[str], root: Path = ROOT, submitted: Path | None = None,
                     shards: int | None = None, graders: int | None = None, csv_path: Path | None = None,
                     progress: bool = True, regrade: bool = False, no_sandbox: bool = False, retries: int = 2,
                     on_merged=None, address: str = "", wait_for_workers: float = 120) -> dict:
    """Grade the submissions of `assignments` on the workers of a Dask `client` and merge them into
    root's gradebook; returns the batch's dict (run._finish) with "shards" and "notes" (what happened
    to each shard: lost workers, resends). `graders`: parallel graders per shard (default: the
    worker machine's cores)."""
    if retries < 0 or (shards is not None and shards < 1):
        raise PipelineError(f"--retries must be 0 or more and --shards 1 or more (got {retries}, {shards})")
    started = time.monotonic()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = submitted or root / "submitted"
    jobs = find_jobs(assignments, submitted, root)
    names = sorted({j.assignment for j in jobs})
    if not names:
        return batch._finish([], started, usage0, 0, csv_path, 0)
    workers = _wait_for_workers(client, address, wait_for_workers)
    files.sweep()
    work = files.scratch_dir("cluster")
    version = grader_version()
    shard_list: list[Shard] = []
    futures: dict = {}
    try:
        due, src_digests, backup, digests, results = _course_state(names, jobs, root, no_sandbox, version, regrade)
        todo = [i for i in range(len(jobs)) if i not in results]
        batch._write_table(csv_path, jobs, results)
        bar = batch.progress_bar(len(jobs), len(results)) if progress else None
        gb = batch.open_gradebook(root)
        try:
            state: dict = {}
            for i in sorted(results):
                batch.merge_one(gb, results[i], root, backup, on_merged, state)
            batch._write_table(csv_path, jobs, results)
            count = min(len(todo), shards or workers) if todo else 0
            shard_list = [Shard(k, todo[k::count]) for k in range(count)]
            run = _Run(client, jobs, results, retries, futures, course_files(root, names),
                       {"grader": version, "due": due, "graders": graders, "no_sandbox": no_sandbox})
            index = {(j.assignment, j.student): i for i, j in enumerate(jobs)}

            def merge(out: dict, shard: Shard) -> None:
                _merge_shard(out, shard, jobs, index, results, work, root, gb, backup, on_merged, state, digests,
                             src_digests, version, run.notes)

            from distributed import as_completed

            pending = as_completed([run.send(s) for s in shard_list])
            for fut in pending:
                again = run.receive(fut, merge)
                if again is not None:
                    pending.add(again)
                batch._write_table(csv_path, jobs, results)
                if bar is not None:
                    bar.n = len(results)
                    bar.refresh()
            batch.export_with_failures(gb, root, results)
        finally:
            if bar is not None:
                bar.close()
            gb.close()
    except files.DiskFull as e:
        raise batch.disk_full(e) from None
    except BaseException:
        for fut in list(futures):
            fut.cancel()
        raise
    finally:
        files.rmtree(work)
    done = batch._finish([results[i] for i in sorted(results)], started, usage0, workers, csv_path,
                         sum(len(s.jobs) for s in shard_list), jobs)
    done["cpu_s"] = run.cpu
    done["shards"] = [{"number": s.number + 1, "submissions": len(s.jobs), "attempts": s.attempts, "hosts": s.hosts,
                       "lost": s.lost} for s in shard_list]
    done["notes"] = [f"{len(shard_list)} shards on {workers} Dask workers" + (f" ({address})" if address else "")] \
        + run.notes + reruns(client, run.id, shard_list)
    return done


def _course_state(names: list[str], jobs: list[Job], root: Path, no_sandbox: bool, version: str, regrade: bool):
    """(due dates, source digests, the gradebook's backup, each job's digest, the results reused from
    records or failed already) before the first shard is sent."""
    due = course_duedates(names, root)
    # the same digests as the batch on one machine: records made here and there are interchangeable
    src_digests = batch.source_digests(names, root, due, no_sandbox)
    for a in names:
        prepare_gradebook(a, root)
    backup = backup_gradebook(root)
    digests, results = batch.reusable_records(jobs, root, src_digests, version, regrade)
    results.update({i: Result(j, None, j.problem, 0.0) for i, j in enumerate(jobs) if j.problem})
    return due, src_digests, backup, digests, results


def _wait_for_workers(client, address: str, timeout: float) -> int:
    """The number of workers once at least one has joined the scheduler."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError) as e:
        raise PipelineError(f"no Dask worker joined the scheduler {address or client.scheduler.address} within "
                            f"{timeout:.0f} s ({type(e).__name__}); start some (`dask worker ADDRESS`)") from None
    return len(client.scheduler_info().get("workers", {}))


class _Run:
    """One run's shards in flight: sending a shard, and what to do with each that comes back (merge
    it, send it again after a lost worker, or mark its students failed)."""

    def __init__(self, client, jobs: list[Job], results: dict[int, Result], retries: int, futures: dict,
                 course: dict[str, bytes], common: dict):
        self.client, self.jobs, self.results, self.retries, self.futures = client, jobs, results, retries, futures
        self.id = uuid.uuid4().hex[:10]
        self.course = course                    # the course's files, in every shard
        self.common = {"run": self.id, **common}  # what else every shard carries: grader, due dates, ...
        self.notes: list[str] = []
        self.cpu = 0.0

    def send(self, shard: Shard):
        shard.attempts += 1
        payload = {**self.common, "shard": shard.number, "attempt": shard.attempts,
                   "assignments": sorted({self.jobs[i].assignment for i in shard.jobs}),
                   "files": {**self.course, **submission_files([self.jobs[i] for i in shard.jobs])}}
        fut = self.client.submit(grade_shard, payload, key=f"llmrl-shard-{self.id}-{shard.number}-{shard.attempts}",
                                 pure=False, retries=0)
        self.futures[fut] = shard
        return fut

    def receive(self, fut, merge):
        """Handle a finished future; returns the future of the shard sent again, or None."""
        shard = self.futures.pop(fut)
        try:
            out = fut.result()
        except PipelineError as e:  # the worker's batch refused it: the same everywhere, not retried
            _fail(shard, self.jobs, self.results, f"its worker refused the shard: {e}")
            self.notes.append(f"shard {shard.number + 1}: refused by its worker: {str(e)[:300]}")
        except Exception as e:  # a worker died (KilledWorker), the connection broke, ...
            why = f"{type(e).__name__}: {str(e).strip()[:200]}"
            shard.lost.append(why)
            if shard.attempts <= self.retries:
                self.notes.append(f"shard {shard.number + 1}: attempt {shard.attempts} was lost ({why}); sent "
                                  f"again (attempt {shard.attempts + 1} of {self.retries + 1})")
                return self.send(shard)
            _fail(shard, self.jobs, self.results, f"lost: the worker grading its shard failed {shard.attempts} "
                                                  f"times ({why}); run the batch again to grade it")
            self.notes.append(f"shard {shard.number + 1}: lost {shard.attempts} times, its "
                              f"{len(shard.jobs)} submissions are marked failed ({why})")
        else:
            shard.hosts.append(f"{out['host']} (pid {out['pid']})")
            self.cpu += out.get("cpu_s", 0.0)
            merge(out, shard)
        return None


def _merge_shard(out, shard, jobs, index, results, work, root, gb, backup, on_merged, state, digests, src_digests,
                 version, notes) -> None:
    """A finished shard's results into the gradebook: each of the shard's own submissions once."""
    expected = set(shard.jobs)
    for d in out["results"]:
        i = index.get((d["assignment"], d["student"]))
        if i not in expected or i in results:
            notes.append(f"shard {shard.number + 1}: sent {d['student']}/{d['assignment']}, which it was not given "
                         f"or which is merged already; left out")
            continue
        job = jobs[i]
        r = Result(job, d["report"], d["error"], float(d["seconds"]))
        if r.report is not None:
            _local_paths(r.report, job)
            folder = work / f"{i:05d}"
            for name, data in d["files"].items():
                _write(folder, name, zlib.decompress(data))
            r.out = folder
            save_record(root, r, digests[i], src_digests[job.assignment], version)
        batch.merge_one(gb, r, root, backup, on_merged, state)
        results[i] = r
    for i in sorted(expected - set(results)):
        results[i] = Result(jobs[i], None, "its shard's batch sent no result for this submission", 0.0)


def _local_paths(report: dict, job: Job) -> None:
    """The report's notebook files as this machine names them (the worker's were in its scratch course)."""
    mine = {p.name: p for p in job.files}
    for nb in report.get("notebooks", []):
        if nb.get("file"):
            nb["file"] = str(mine.get(Path(nb["file"]).name, nb["file"]))


def _fail(shard: Shard, jobs: list[Job], results: dict, why: str) -> None:
    for i in shard.jobs:
        if i not in results:
            results[i] = Result(jobs[i], None, why[:300], 0.0)


def course_files(root: Path, assignments: list[str]) -> dict[str, bytes]:
    """What a worker needs of the course, compressed: source/<assignment>/ (as make_template copies it,
    links left out) and the course's own nbgrader_config.py."""
    out = {}
    ignored = COPY_IGNORE
    for a in assignments:
        base = root / "source" / a
        for folder, dirs, names in os.walk(base):
            skip = ignored(folder, dirs + names)
            dirs[:] = [d for d in dirs if d not in skip and not os.path.islink(os.path.join(folder, d))]
            for name in names:
                p = Path(folder) / name
                if name not in skip and files.is_regular(p):
                    out[p.relative_to(root).as_posix()] = zlib.compress(files.read_regular(p, MAX_FILE), 6)
    config = root / "nbgrader_config.py"
    if files.is_regular(config):
        out["nbgrader_config.py"] = zlib.compress(files.read_regular(config, 1 << 20), 6)
    return out


def submission_files(jobs: list[Job]) -> dict[str, bytes]:
    """The jobs' notebooks (the ones the batch matched) and side files, as submitted/<student>/<assignment>/."""
    out = {}
    for j in jobs:
        base = f"submitted/{j.student}/{j.assignment}"
        for p in j.files:
            out[f"{base}/{p.name}"] = zlib.compress(files.read_regular(p, MAX_FILE), 6)
        for name, data in j.side.items():
            out[f"{base}/{name}"] = zlib.compress(data, 6)
    return out


def reruns(client, run: str, shard_list: list[Shard]) -> list[str]:
    """Shards that Dask itself started more often than this machine sent them (a worker was lost and
    the scheduler ran the shard again), from the workers' start events."""
    try:
        events = client.get_events(EVENTS)
    except Exception:  # an older scheduler, or the connection is gone: nothing to add
        return []
    starts: dict[tuple[int, int], int] = {}
    for _, msg in events:
        if isinstance(msg, dict) and msg.get("run") == run:
            key = (msg.get("shard"), msg.get("attempt"))
            starts[key] = starts.get(key, 0) + 1
    notes = []
    for s in shard_list:
        extra = sum(max(0, starts.get((s.number, a), 0) - 1) for a in range(1, s.attempts + 1))
        if extra:
            notes.append(f"shard {s.number + 1}: started {extra} more time(s) than it was sent (a worker was lost "
                         f"and the scheduler ran it again)")
    return notes
