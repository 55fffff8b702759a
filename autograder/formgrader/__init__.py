"""nbgrader's formgrader with its Manual Grading page made inert: a Jupyter server extension
(autograder.formgrader.safe_formgrader).
"""
