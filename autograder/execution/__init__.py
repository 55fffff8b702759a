"""The two runs of a notebook (feedback run, grading run), the sandboxed kernels, the calls from the tests'
kernel into the student's (remote_calls.py and wire_format.py are also sent into the kernel as source text).
"""
