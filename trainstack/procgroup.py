"""Stopping a process group we started: SIGTERM, wait, SIGKILL, then reap anything left in it.
Never by name: only the group of a child started with start_new_session=True."""
from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, term_wait_s: float = 15.0, kill_wait_s: float = 5.0) -> None:
    for sig, wait in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, kill_wait_s)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # children left in the group after its leader exited
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent() -> None:
    """In a child before exec (preexec_fn): SIGKILL it when its parent dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
