"""The course on a shared JupyterHub (`make hub`, `make test-hub`).

- deploy.py: accounts, course folder, exchange, Python environment and configuration of a hub for
  this course; start, stop and remove it (`python -m hub.deploy up|setup|remove`).
- jupyterhub_config.py: the hub's configuration, read from the settings deploy.py writes.
- spawner.py: single-user servers started as the students' own OS users, each on a unix socket.
- confine.py: starts a student's server (or a test's command) inside their limits: cgroups, a mount
  namespace with their own /tmp and inbound, rlimits; limits.py: those limits and each student's
  loop-mounted filesystem.
- capacity.py: how many servers fit in memory, measured on a hub of N students.
- course_tool.py: copied into the instructor's course folder; records assignments and students in
  the gradebook and runs the batch grader there.
- templates/: the hub's pages with the instructor's link to the formgrader (its own tab).
- tests/: the whole course cycle against a running hub, through its REST API and in chromium.
"""
