"""What keeps a kernel in: bubblewrap and resource limits (bubblewrap.py also runs as a script, stdlib only, to
start each kernel), and file helpers that never follow a link.
"""
