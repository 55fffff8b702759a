# Lets plain `nbgrader ...` commands run from the repository root use the course settings.
load_subconfig("autograder/nbgrader_config.py")  # noqa: F821
