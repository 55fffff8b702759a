"""The on-submit service: it finds new submissions in the students' inbounds, queues them, grades them as
the grading account (course_tool.py grade-one) in a view without the hub's other folders, stores the
results apart and delivers each status to the student."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import threading
import time
from functools import partial
from pathlib import Path

from hub import processes
from hub.on_submit.delivery import Delivery
from hub.on_submit.pages import summary_of, utc
from hub.on_submit.queue import MAX_ATTEMPTS, Queue
from hub.on_submit.settings import MODES_FILE, Settings, read_modes

SETTLE_S = 2.0                            # a submission folder untouched this long is complete


class Service:
    def __init__(self, settings: Settings, log=None):
        self.s = settings
        self.queue = Queue(settings.queue_file)
        self.stopping = threading.Event()
        self.running: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.modes: dict[str, str] = {}
        self.modes_changed = time.time()
        self.sync_lock = threading.Lock()
        self.rate_told: dict[int, float] = {}
        self.skipped: set = set()
        self._log = log or (lambda m: print(f"[on-submit] {m}", flush=True))
        self.log_path = settings.folders.log
        self.delivery = Delivery(settings, self.queue, self.log)

    def log(self, msg: str) -> None:
        self._log(msg)
        try:
            with open(self.log_path, "a") as f:
                f.write(f"{utc(time.time())} {msg}\n")
        except OSError:
            pass

    # -- reading the instructor's switch
    def refresh_modes(self) -> None:
        try:
            self.modes = read_modes(self.s.course_dir)
            path = self.s.course_dir / MODES_FILE
            # when the instructor last changed the switch: what is handed in after it is graded
            self.modes_changed = os.lstat(path).st_mtime if self.modes else time.time()
        except (ValueError, OSError) as e:
            self.log(f"on_submit.json not read, the earlier settings stay: {e}")

    # -- finding submissions
    def scan(self) -> int:
        """Queue every new, complete submission of an assignment graded on submit; how many were queued."""
        from autograder.collect import exchange

        self.refresh_modes()
        since = self.queue.switched_on(self.modes, now=min(time.time(), self.modes_changed))
        added = 0
        for student in self.s.students:
            inbound = self.s.inbound_of(student)
            try:
                names = sorted(os.listdir(inbound))
                uid = pwd.getpwnam(student).pw_uid
            except (OSError, KeyError):
                continue
            for name in names:
                parts = name.split("+")
                # a folder in another's name, or malformed: the batch's collect sets it aside and says why
                if len(parts) != 4 or parts[0] != student:
                    continue
                assignment = parts[1]
                mode = self.modes.get(assignment, "off")
                if mode == "off":
                    continue
                folder = inbound / name
                try:
                    st = os.lstat(folder)
                    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                        self.skip(folder, "not a folder of the student's own")
                        continue
                    written = exchange.written_at(folder, max_entries=1000)
                except OSError as e:
                    self.skip(folder, f"cannot be read ({e})")
                    continue
                stamp = written.replace(tzinfo=datetime.timezone.utc).timestamp()
                if stamp < since.get(assignment, float("inf")):
                    # handed in before grading on submit was switched on: the batch grades it
                    self.skip(folder, f"handed in before {assignment} was switched on ({utc(since[assignment])})")
                    continue
                if time.time() - stamp < SETTLE_S or not os.path.lexists(folder / "timestamp.txt"):
                    continue  # nbgrader submit is still writing it (timestamp.txt comes last)
                key = f"{name}@{stamp:.6f}"
                if self.queue.known(key):
                    continue
                self.enqueue(student, assignment, mode, folder, key)
                added += 1
        return added

    def skip(self, folder: Path, why: str) -> None:
        """Say once per folder why it is not graded on submit (the service's log)."""
        if folder not in self.skipped:
            self.skipped.add(folder)
            self.log(f"not graded on submit: {folder.name}: {why}")

    def enqueue(self, student: str, assignment: str, mode: str, folder: Path, key: str) -> None:
        from autograder.collect import exchange

        job_id, _ = self.queue.add(student, assignment, folder.name, key, "", mode, state="arriving")
        spool = self.s.spool / str(job_id)
        dest = spool / "submitted" / student / assignment
        try:
            if spool.exists():
                shutil.rmtree(spool)
            dest.parent.mkdir(parents=True)
            report = exchange.copy_submission(folder, dest, pwd.getpwnam(student).pw_uid, exchange.Limits())
            record = exchange.check(folder, dest)
            submitted_at = record["graded_as"].strip()
            notes = [f"not graded: {r}" for r in report.refused]
            if record["replaced"]:
                notes.append(f"your timestamp.txt says {str(record['timestamp_txt'] or 'nothing').strip()[:80]}, "
                             f"your files were written at {record['files_written']}: graded as the latter")
            (spool / "notes.json").write_text(json.dumps(notes))
            self.give_to_grader(spool)
        except (OSError, ValueError) as e:
            self.queue.finish(job_id, "refused", f"your submission could not be read: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
            self.delivery.deliver(self.queue.get(job_id))
            return
        # queued, and the older queued ones of this student replaced, now that this one is complete
        older = self.queue.ready(job_id, submitted_at)
        for i in older:
            shutil.rmtree(self.s.spool / str(i), ignore_errors=True)
        self.log(f"queued {student}/{assignment} ({folder.name}) as job {job_id}"
                 + (f", replacing {older}" if older else ""))
        self.delivery.deliver(self.queue.get(job_id))

    def give_to_grader(self, path: Path) -> None:
        pw = pwd.getpwnam(self.s.grader)
        for p in [path, *path.rglob("*")]:
            os.lchown(p, pw.pw_uid, pw.pw_gid)
            if not p.is_symlink():
                os.chmod(p, 0o700 if p.is_dir() else 0o600)

    # -- the grader's copy of the course
    def sync_course(self, assignment: str) -> None:
        """The grading account's course folder: the instructor's source/<assignment>, grader, settings."""
        src, dst = self.s.course_dir, self.s.grader_course
        with self.sync_lock:
            changed = False
            for rel in (f"source/{assignment}", "autograder", "course_tool.py", "nbgrader_config.py"):
                a, b = src / rel, dst / rel
                if _digest(a) == _digest(b):
                    continue
                changed = True
                if b.is_dir() and not b.is_symlink():
                    shutil.rmtree(b)
                elif os.path.lexists(b):
                    b.unlink()
                b.parent.mkdir(parents=True, exist_ok=True)
                if a.is_dir():
                    shutil.copytree(a, b, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(a, b)
            if changed:
                self.give_to_grader(dst)
                os.chmod(dst, 0o700)

    def due_date(self, assignment: str) -> str:
        from autograder.batch.gradebook_merge import course_duedates

        due = course_duedates([assignment], self.s.course_dir)[assignment]
        return "" if due is None else due.isoformat()

    def grader_env(self) -> dict:
        pw = pwd.getpwnam(self.s.grader)
        return {"HOME": pw.pw_dir, "USER": self.s.grader, "LOGNAME": self.s.grader, "LANG": "C.UTF-8",
                "PATH": f"{self.s.env / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LLMRL_CACHE": str(self.s.cache),
                "PYTHONPATH": str(self.s.grader_course), "PYTHONUNBUFFERED": "1"}

    def grader_view(self, job_dir: Path) -> list[str]:
        """course_tool.hiding_view's settings for one job: nothing of the hub but this job's own folder."""
        from hub.course_tool import hiding_view

        return hiding_view({
            "hide": [str(self.s.exchange), str(self.s.repo), str(self.s.users_dir), str(self.s.spool),
                     str(self.s.results), str(self.s.state)],
            "show": sorted({str(self.s.repo / ".venv"), str(self.s.repo / "lib"), str(self.s.env)}),
            "writable": [str(job_dir)]})

    # -- grading one job
    def grade(self, row) -> None:
        job_id, student, a, mode = row["id"], row["student"], row["assignment"], row["mode"]
        spool = self.s.spool / str(job_id)
        self.delivery.deliver(row)  # "being graded"
        started = time.monotonic()
        try:
            self.sync_course(a)
            due = self.due_date(a)
        except Exception as e:  # noqa: BLE001 - the course's problem, never the student's
            self.queue.finish(job_id, "error", "the course's grader could not be prepared; your instructor's "
                              "grading will grade this submission")
            self.log(f"job {job_id}: preparing the grader failed: {type(e).__name__}: {e}")
            self.delivery.deliver(self.queue.get(job_id))
            return
        out = spool / "out"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        self.give_to_grader(out)
        python = str(self.s.env / "bin" / "python")
        cmd = self.grader_view(spool) + [python, str(self.s.grader_course / "course_tool.py"), "grade-one", a,
                                         "--submitted", str(spool / "submitted"), "--out", str(out),
                                         "--duedate", due or "-", "--mode", mode]
        pw = pwd.getpwnam(self.s.grader)
        try:
            proc = subprocess.Popen(cmd, cwd=str(self.s.grader_course), env=self.grader_env(), user=pw.pw_uid,
                                    group=pw.pw_gid, extra_groups=[], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                    preexec_fn=partial(processes.die_with_parent, signal.SIGKILL))  # after the uid change
        except OSError as e:
            self.queue.finish(job_id, "error", "the grader could not be started; your instructor's grading will "
                              "grade this submission")
            self.log(f"job {job_id}: {e}")
            return
        with self.lock:
            self.running[job_id] = proc
        try:
            log, _ = proc.communicate(timeout=2 * 600 + 600)
        except subprocess.TimeoutExpired:
            _killpg(proc)
            log, _ = proc.communicate()
        finally:
            with self.lock:
                self.running.pop(job_id, None)
        if self.stopping.is_set():
            self.queue.put_back(job_id)  # the service stops: graded again when it starts
            return
        (spool / "grade.log").write_text(log or "")
        result_file = out / "result.json"
        try:
            result = json.loads(result_file.read_text()) if result_file.is_file() else None
        except ValueError:
            result = None
        if proc.returncode != 0 or result is None:
            tail = "; ".join((log or "").strip().splitlines()[-3:])[:500]
            self.log(f"job {job_id}: the grading exited with {proc.returncode}: {tail}")
            if row["attempts"] < MAX_ATTEMPTS:
                self.queue.requeue(job_id)
                return
            self.queue.finish(job_id, "held", f"its grading failed {row['attempts']} times")
            self.store(row, None, spool)
            self.delivery.deliver(self.queue.get(job_id))
            return
        notes = json.loads((spool / "notes.json").read_text()) if (spool / "notes.json").is_file() else []
        result["notes"] = notes + list(result.get("notes") or [])
        state, message = self.verdict(result)
        summary = summary_of(result, mode)
        summary["seconds"] = round(time.monotonic() - started, 1)
        self.queue.finish(job_id, state, message, summary)
        stored = self.store(row, result, spool)
        self.log(f"job {job_id} {student}/{a}: {state} in {summary['seconds']} s {message}")
        self.delivery.deliver(self.queue.get(job_id), stored)

    @staticmethod
    def verdict(result: dict) -> tuple[str, str]:
        report = result.get("report")
        if report is None:
            return "refused", result.get("error") or "it could not be graded"
        if report.get("needs_manual_review") or any(nb.get("needs_manual_review") for nb in report.get("notebooks", [])):
            return "held", ""
        missing = [nb["notebook"] for nb in report.get("notebooks", []) if nb.get("status") == "missing"]
        if missing and len(missing) == len(report.get("notebooks", [])):
            handed = ", ".join(result.get("handed_in") or []) or "no notebook"
            why = "; ".join(result.get("notes") or [])
            return "refused", (f"none of this assignment's notebooks ({', '.join(f'{m}.ipynb' for m in missing)}) is "
                               f"in it: you handed in {handed}" + (f" ({why})" if why else "")
                               + ". Submit the assignment's own notebook, saved by JupyterLab.")
        return "graded", ""

    def store(self, row, result: dict | None, spool: Path) -> Path:
        """results/<assignment>/<student>/<job>/ (readable by the instructor) and latest.json beside it."""
        inst = pwd.getpwnam(self.s.instructor)
        folder = self.s.results / row["assignment"] / row["student"] / str(row["id"])
        folder.mkdir(parents=True, exist_ok=True)
        out = spool / "out"
        if result is not None and out.is_dir():
            for p in out.iterdir():
                if p.is_file() and not p.is_symlink() and p.suffix in (".ipynb", ".html", ".json"):
                    shutil.copyfile(p, folder / p.name)
        sub = spool / "submitted" / row["student"] / row["assignment"]
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (sub / name).is_file() and not (sub / name).is_symlink():
                shutil.copyfile(sub / name, folder / name)
        job = self.queue.get(row["id"])
        record = {k: job[k] for k in ("id", "student", "assignment", "folder", "submitted_at", "mode", "state",
                                      "message", "attempts", "queued_at", "started_at", "finished_at")}
        record["summary"] = json.loads(job["summary"] or "{}")
        (folder / "job.json").write_text(json.dumps(record, indent=1))
        (folder.parent / "latest.json").write_text(json.dumps(dict(record, folder_path=str(folder)), indent=1))
        for p in [self.s.results / row["assignment"], folder.parent, folder, *folder.iterdir(), folder.parent / "latest.json"]:
            os.chown(p, 0, inst.pw_gid)
            os.chmod(p, 0o750 if p.is_dir() else 0o640)
        shutil.rmtree(spool, ignore_errors=True)
        return folder

    def tell_rate_limited(self) -> None:
        for row, when in self.queue.waiting_for_rate(self.s.rate_per_hour):
            if self.rate_told.get(row["id"]) == when:
                continue
            self.rate_told[row["id"]] = when
            self.delivery.deliver(row, message=f"You have had {self.s.rate_per_hour} submissions of the course graded in "
                                      f"the last hour, the most there can be: this one is graded after {utc(when)}. "
                                      f"Only your latest submission is graded.")

    # -- the loops
    def worker(self) -> None:
        while not self.stopping.is_set():
            row = self.queue.take(self.s.rate_per_hour)
            if row is None:
                self.stopping.wait(1.0)
                continue
            try:
                self.grade(row)
            except Exception as e:  # noqa: BLE001 - one job's failure never stops the service
                self.log(f"job {row['id']}: {type(e).__name__}: {e}")
                if not self.stopping.is_set():
                    self.queue.finish(row["id"], "error", "the grader failed on this submission; your instructor's "
                                      "grading will grade it")
                    self.delivery.deliver(self.queue.get(row["id"]))

    def load_grader(self) -> None:
        """The grader's modules the service's threads use (the collect, the gradebook's due dates, the
        feedback pages' labels), imported here once before the threads start: two threads importing
        nbgrader for the first time at once can each meet the other's half-made module (after a restart
        with submissions queued, the scan and a worker did, and every queued grading failed). One that
        cannot be imported now is tried again, and its error reported, by each grading that needs it."""
        try:
            import autograder.batch.gradebook_merge  # noqa: F401
            import autograder.collect.exchange  # noqa: F401
            import autograder.export.feedback_pages  # noqa: F401
        except Exception as e:  # noqa: BLE001 - the course's problem: each grading says it
            self.log(f"the grader's modules were not loaded: {type(e).__name__}: {e}")

    def serve(self) -> None:
        self.load_grader()
        for r in self.queue.recover():
            self.log(f"job {r['id']} ({r['student']}/{r['assignment']}) was being graded when the service stopped: "
                     f"{'held' if r['attempts'] >= MAX_ATTEMPTS else 'queued again'}")
            if r["attempts"] >= MAX_ATTEMPTS:
                self.delivery.deliver(self.queue.get(r["id"]))
        threads = [threading.Thread(target=self.worker, name=f"on-submit-{i}", daemon=True)
                   for i in range(self.s.workers)]
        for t in threads:
            t.start()
        self.log(f"watching {len(self.s.students)} students' inbounds with {self.s.workers} workers")
        while not self.stopping.is_set():
            try:
                self.scan()
                self.tell_rate_limited()
            except Exception as e:  # noqa: BLE001
                self.log(f"scan: {type(e).__name__}: {e}")
            self.stopping.wait(self.s.poll_s)
        with self.lock:
            procs = list(self.running.values())
        for p in procs:
            _killpg(p)
        for t in threads:
            t.join(timeout=30)
        self.queue.close()

    def stop(self, *_):
        self.stopping.set()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    if not os.path.lexists(path):
        return "-"
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    for p in sorted(path.rglob("*")):
        if "__pycache__" in p.parts or p.suffix == ".pyc":
            continue
        h.update(str(p.relative_to(path)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
