"""One student's notebooks graded in a scratch course (autograder.cli.grade runs it once per student); which
file is which notebook.
"""
