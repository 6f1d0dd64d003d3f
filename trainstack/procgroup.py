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
