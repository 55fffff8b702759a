"""Out of the gradebook: grades.csv and the score table, feedback pages, grades for Canvas or Moodle (nbgrader
exporter plugins).
"""
