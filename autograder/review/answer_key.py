"""The answer-key check, as the grader calls it: the task map, the static notes and the runtime watch.

Its parts: task_map.py (+ task_map.json: which graded tasks the library can do), library_index.py
(the library's functions and call graph), static_analysis.py + scopes.py + static_notes.py (the
notebook's code followed with `ast`), runtime_watch.py (the watch and the probe in the student's
kernel, and the notes from their reports). static_notes.py's docstring tells the whole design.

    notes = review_notes(assignment, notebook)              # notebook: nbformat node, dict or path
    watch = watch_module(assignment, notebook_name)         # installed as _llmrl_watch in the kernel
    code, expression = runtime_probe(assignment, notebook_name)
    notes += runtime_notes(assignment, notebook_name, text_plain, text=text_fingerprints(notebook))
    notes += watch_notes(assignment, notebook_name, what_the_graded_calls_ran, how_probe_calls_ended, text=...)
"""

from __future__ import annotations

from autograder.review.runtime_watch import (probe_keys, runtime_notes, runtime_probe, text_fingerprints,
                                             watch_module, watch_notes)
from autograder.review.static_notes import review_notes
from autograder.review.task_map import ANYWHERE, TASKS, tasks_for, what_the_library_can_do

__all__ = ["ANYWHERE", "TASKS", "all_notes", "probe_keys", "review_notes", "runtime_notes", "runtime_probe",
           "tasks_for", "text_fingerprints", "watch_module", "watch_notes", "what_the_library_can_do"]


def all_notes(assignment: str, notebook, notebook_name: str, runtime_answer=None) -> list[str]:
    """Static notes, plus the runtime ones when the probe's answer is given (duplicates dropped)."""
    notes = review_notes(assignment, notebook, notebook_name)
    if runtime_answer is not None:
        notes += runtime_notes(assignment, notebook_name, runtime_answer)
    return list(dict.fromkeys(notes))
