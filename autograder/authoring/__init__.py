"""The instructor's side before grading: jupytext -> source -> release (build, execute, release, validate), the
sample students, the demo course, an LMS's sample files.
"""
