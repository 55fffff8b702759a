"""Grading on submit: a student's feedback on the hub minutes after they submit (docs/hub.md,
"Feedback on submit").

A hub-managed service (jupyterhub_config.py starts `python -m hub.on_submit serve SETTINGS` as root,
with the course folder and then the repository on PYTHONPATH: the grader's modules it uses are the
course folder's copy; it ends with the hub) watches each student's own inbound, the folder `nbgrader
submit` writes into on the hub (hub/layout.py: users/<student>/inbound). For an assignment whose setting is not "off"
(`python course_tool.py on-submit ASSIGNMENT off|feedback|score`, the instructor's file
on_submit.json in the course folder), each new submission is:

1. copied out of the inbound the way the course's collect copies it (autograder/collect/exchange.py:
   regular files owned by the student only, never a link, capped; the time the batch would grade,
   which is the inbound files' time when the student's timestamp.txt disagrees with it), into a
   spool folder of the grading account's;
2. queued in a sqlite file out of everyone's reach but root's (state/on-submit.sqlite). The queue is
   fair between students: at most one grading of a student at a time, the student served longest ago
   goes first, a newer submission replaces that student's queued older one, and a student who had
   `rate_per_hour` gradings in the last hour waits (the status page says until when). A restart
   keeps the queue: a submission is known by its folder and the time its files were written, so it is
   never queued twice; one that was being graded when the service stopped is graded again, and one
   whose grading was cut short twice (a crash) is shown as held;
3. graded by the course's batch grader for one student (course_tool.py grade-one: the same sandbox,
   two runs, answer kernel, runtime watch and holds, the self-check of the reference solutions once
   per version of the assignment), as the grading account (`<instructor>-grader`, never a student,
   never in a student's server), in a view of the machine without the exchange, the students'
   folders, the repository, the queue or the other submissions (course_tool.hiding_view);
4. stored apart from the instructor's gradebook: on-submit/results/<assignment>/<student>/<job>/
   (readable by the instructor; course_tool.py on-submit-grades, accept-on-submit and autograde's
   comparison read it). The gradebook itself is written only by the instructor's batch or by
   `course_tool.py accept-on-submit`;
5. delivered into the student's own folder ~/<assignment>/on-submit-feedback/: status.html (queued,
   being graded, the score per task and concern, held for review, or what was wrong with the
   submission), status.json (the same for programs) and, unless held, the batch's feedback page of
   each notebook (with the points hidden in the "feedback" setting). The files are written by a
   process running as the student, opened without following links: a student can only ever
   overwrite their own files.

Stdlib only at import time, with the hub's own stdlib-only modules (the service imports the grader's
collect lazily).

The package's files:

    settings.py   what the service reads (Settings), the instructor's switch (on_submit.json), prepare
    queue.py      the queue in sqlite (Queue): fairness, replacing, the rate limit, restarts
    pages.py      what the student reads: status.json's summary and status.html
    delivery.py   writing it into the student's folder, as the student
    service.py    the service: finding submissions, grading them, its threads
    __main__.py   `python -m hub.on_submit serve|queue SETTINGS`
"""

from hub.on_submit.pages import status_page, summary_of, utc
from hub.on_submit.queue import MAX_ATTEMPTS, STATES, Queue
from hub.on_submit.service import Service
from hub.on_submit.settings import FEEDBACK_DIR, MODES, MODES_FILE, Settings, default_workers, prepare, read_modes, \
    write_modes

__all__ = ["FEEDBACK_DIR", "MAX_ATTEMPTS", "MODES", "MODES_FILE", "STATES", "Queue", "Service", "Settings",
           "default_workers", "prepare", "read_modes", "status_page", "summary_of", "utc", "write_modes"]
