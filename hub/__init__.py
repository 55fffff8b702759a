"""The course on a shared JupyterHub (`make hub`, `make test-hub`).

- deploy/: accounts, course folder, exchange, Python environment and configuration of a hub for
  this course; start, stop and remove it (`python -m hub.deploy up|setup|remove`; its files are
  named by their jobs, deploy/__init__.py lists them).
- jupyterhub_config.py: the hub's configuration, read from the settings hub/deploy writes (jupyterhub
  exec's it, with the repository on PYTHONPATH).
- spawner.py: single-user servers started as the students' own OS users, each on a unix socket.
- confine.py: starts a student's server (or a test's command) inside their limits: cgroups, a mount
  namespace with their own /tmp and inbound, rlimits (`python -m hub.confine`, from the repository's
  folder); limits.py: those limits and each student's loop-mounted filesystem.
- layout.py: the folders on each student's filesystem and those of grading on submit, for every part
  that finds them; processes.py: a child that dies with its parent.
- on_submit/: grading on submit, a service of the hub's (`python -m hub.on_submit serve`).
- lti.py: logging in from an LMS with LTI 1.3.
- capacity.py: how many servers fit in memory, measured on a hub of N students.
- course_tool.py: copied into the instructor's course folder (and run there, no hub module imported);
  records assignments and students in the gradebook and runs the batch grader there.
- templates/: the hub's pages with the instructor's link to the formgrader (its own tab).
- tests/: the whole course cycle against a running hub, through its REST API and in chromium;
  the import rules (test_hub_layers.py).

Every part imports the others by their package path (`from hub import limits`) and none puts a
folder on sys.path (hub/tests/test_hub_layers.py checks both and which part may import which).
"""
