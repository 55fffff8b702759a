"""Grading runs in the sandbox, or the instructor says it may not: the check before the first student.

bubblewrap (autograder/sandbox/bubblewrap.py) is what keeps a submission's code away from the rest
of the machine: the hidden tests in source/, the other students' work, gradebook.db. Where it is
missing or cannot start a sandbox, the batch (autograder/cli/batch.py, `make autograde`,
`make grade-all`, `make demo`) and the one-submission command (autograder/cli/grade.py) stop with
one error that says what is missing and how to install it, before anything is graded, unless the
instructor passes --no-sandbox (`make ... NO_SANDBOX=1`).

With --no-sandbox every kernel runs with the resource limits only (LLMRL_SANDBOX=0 in its
environment, also where bubblewrap works), each grading process has UNSANDBOXED_ENV set to the
reason, every feedback page carries a notice saying so (autograder/export/feedback_pages.py), the
batch table's `sandbox` column says `none` and the autograded notebook keeps the mark, so that a
page made again later (`make feedback`) still says it.
"""

from __future__ import annotations

import os

from autograder.course.layout import PipelineError
from autograder.export.feedback_pages import UNSANDBOXED_ENV

# How to get bubblewrap, for the error (the Debian/Ubuntu package is what .ci/run installs).
INSTALL = "sudo apt install bubblewrap (Debian/Ubuntu; Fedora: sudo dnf install bubblewrap)"
GO_ON = ("or grade without it on purpose with --no-sandbox (make demo / make autograde / make grade-all "
         "NO_SANDBOX=1): every feedback page and batch_grades.csv then say the grades were made without the sandbox")


def bwrap_status(fresh: bool = False) -> str:
    """'ok', or why bubblewrap cannot be used here (the sandbox's own check)."""
    from autograder.sandbox import bubblewrap

    if fresh:
        bubblewrap.bwrap_status.cache_clear()
    return bubblewrap.bwrap_status()


def refusal(status: str) -> str:
    """The one-line error for a machine where the sandbox does not work (`status`: bwrap_status())."""
    if status.startswith("turned off with LLMRL_SANDBOX=0"):
        what, fix = "LLMRL_SANDBOX=0 is set in the environment", "unset LLMRL_SANDBOX"
    elif status.startswith("bwrap not found"):
        what, fix = "bubblewrap (the bwrap command) is not installed", f"install it: {INSTALL}"
    else:
        what = f"bubblewrap is installed but cannot start a sandbox here ({status})"
        fix = ("let it create user namespaces (in a container: run it with them allowed; on Ubuntu 24.04 and "
               "later: an AppArmor profile for bwrap, or sysctl kernel.apparmor_restrict_unprivileged_userns=0)")
    return (f"grading refused: the grading sandbox does not work on this machine: {what}. Without the sandbox a "
            f"student's code could read the hidden tests, the other submissions and gradebook.db. To grade, {fix}, then run "
            f"the command again; {GO_ON}. Nothing was graded.")


def decide(no_sandbox: bool) -> str:
    """'' when grading runs in the sandbox; with `no_sandbox`, the reason it runs without one, as the
    feedback pages and the batch table say it. PipelineError (refusal) when the sandbox does not
    work and `no_sandbox` was not given."""
    status = bwrap_status()
    if no_sandbox:
        return "the instructor graded with --no-sandbox" + ("" if status == "ok" else f"; here: {status}")
    if status != "ok":
        raise PipelineError(refusal(status))
    return ""


def job_env(reason: str) -> dict[str, str]:
    """What a grading process started by the batch gets: the decision (reason or '') and, without
    the sandbox, LLMRL_SANDBOX=0 for its kernels."""
    return {UNSANDBOXED_ENV: reason, **({"LLMRL_SANDBOX": "0"} if reason else {})}


def in_grading_process(no_sandbox: bool) -> str:
    """The check in one grading process (autograder/cli/grade.py): the batch decided already when it
    set UNSANDBOXED_ENV; otherwise decide here and set the environment the kernels inherit. Returns
    the reason grading runs without the sandbox, or ''."""
    if UNSANDBOXED_ENV in os.environ and not no_sandbox:
        return os.environ[UNSANDBOXED_ENV]
    reason = decide(no_sandbox)
    os.environ.update(job_env(reason))
    if reason:
        bwrap_status(fresh=True)  # LLMRL_SANDBOX=0 from now on: the report's sandbox line says NONE
    return reason


def unsandboxed(report: dict | None) -> str:
    """The reason a graded report was made without the sandbox, or '' (its mark, else its sandbox line)."""
    if not report:
        return ""
    mark = report.get("graded_without_sandbox")
    if mark:
        return str(mark)
    line = str(report.get("sandbox") or "")
    return line.split(";")[0] if line.startswith("NONE") else ""
