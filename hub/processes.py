"""Process set-up shared by the hub's parts (stdlib only)."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process `sig` when its parent ends (Linux; nothing elsewhere). Called in
    a child before it executes (a preexec_fn) or by a service at its start. The setting is cleared by a
    change of uid, so a child that changes it calls this afterwards."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass
