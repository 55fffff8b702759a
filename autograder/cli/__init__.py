"""Command lines of the grader: python -m autograder (course.py: build ... scores), and -m
autograder.cli.grade, .batch, .lms, .corpus, .review. Entry points only: every other folder is a library
they call.
"""
