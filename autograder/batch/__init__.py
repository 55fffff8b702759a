"""Every submission of an assignment graded in parallel worker processes, records reused, results merged into
the gradebook; `make autograde`.
"""
