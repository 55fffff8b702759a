"""Reasons for a person to look: the answer-key check (task_map.json: which graded tasks the library can do;
static analysis; runtime watch and probe) and flags for suspicious code. Never changes a score.
"""
