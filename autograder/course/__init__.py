"""The course folder (paths, labs, the pipeline's error), nbgrader with the course's settings, the class list.
The lowest layer above sandbox/.
"""
