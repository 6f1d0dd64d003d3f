"""Processes we start and stop: the one home of process groups and parentage.

- stop_group: SIGTERM the group (with SIGCONT, so a stopped group handles it), wait the grace, SIGKILL
  the group, reap the leader, and wait until no member is left (a child that outlived its leader too).
- kill_group: SIGKILL the group now (no final checkpoint: the run belongs to another writer).
- die_with_parent / with_parent_death: the child gets SIGKILL when its parent dies (PR_SET_PDEATHSIG),
  as a preexec_fn or, for a threaded parent, as a `setpriv` prefix of the argv.
- pid_alive / group_members / signal_members: what is alive, read from /proc.
Never by name: only groups of children we started with start_new_session=True (or our own group,
minus ourselves, for the guard). Stdlib only: the guard and the worker import it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Collection

REAP_WAIT_S = 5.0  # after SIGKILL: a process in uninterruptible sleep (D state) may take a moment


def _libc_prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # resolved before any fork: the child between fork and exec only calls it
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec (preexec_fn): SIGKILL it when its parent dies (Linux PR_SET_PDEATHSIG).
    The parent is the *thread* that forked: start such children from a long-lived thread."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def with_parent_death(argv: list[str]) -> list[str]:
    """`setpriv --pdeathsig KILL -- argv`: die_with_parent without a preexec_fn (which can deadlock a
    threaded parent between fork and exec); argv unchanged where setpriv is missing."""
    import shutil  # here: the guard imports this module before it starts the trainer

    return ["setpriv", "--pdeathsig", "KILL", "--", *argv] if shutil.which("setpriv") else list(argv)


def pid_alive(pid: int) -> bool:
    """The process exists on this host and is not a zombie (a zombie is dead for our purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(ln.startswith("State:") and "Z" in ln.split()[1] for ln in f)
    except OSError:
        return True


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `proc` to exit; True once it has (reaped: `returncode` set). It wakes
    the moment the process exits (a pidfd, Linux 5.3+; elsewhere Popen.wait's short sleeps), so a
    watcher that also has other work each period (a lease to check) still sees the end at once, not
    at its next period. Signal handlers run meanwhile (select is retried after them, PEP 475)."""
    if proc.poll() is not None:
        return True
    fd = getattr(proc, "_trainstack_pidfd", None)
    if fd is None:
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # no pidfd here, or the process was reaped meanwhile
            fd = -1
        proc._trainstack_pidfd = fd  # type: ignore[attr-defined]
    if fd >= 0:
        import select

        select.select([fd], [], [], timeout_s)  # readable once the process has exited
    else:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        return False
    if fd >= 0:
        os.close(fd)
        proc._trainstack_pidfd = -1  # type: ignore[attr-defined]
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group on this host, from /proc (Linux)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            out.append(int(name))
    return out


def group_alive(pgid: int) -> bool:
    if os.path.isdir("/proc/self"):
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait_empty(pgid: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def _reap(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass


def kill_group(proc: subprocess.Popen, reap_wait_s: float = REAP_WAIT_S) -> int | None:
    """SIGKILL the group of `proc` (started with start_new_session=True) now; reap it. Its exit code."""
    _killpg(proc.pid, signal.SIGKILL)
    _reap(proc, reap_wait_s)
    _wait_empty(proc.pid, reap_wait_s)
    return proc.returncode


def stop_group(proc: subprocess.Popen, term_wait_s: float = 15.0, kill_wait_s: float = REAP_WAIT_S,
               signum: int = signal.SIGTERM) -> int | None:
    """Ask the group of `proc` to stop (`signum`, SIGCONT), give its leader `term_wait_s`, then SIGKILL
    the group; returns once the leader is reaped and no member is left (or `kill_wait_s` passed).
    A leader that already exited: only what it left in its group is killed. Its exit code."""
    if proc.poll() is None and _killpg(proc.pid, signum):
        _killpg(proc.pid, signal.SIGCONT)  # a stopped (SIGSTOP, frozen) group must wake to handle it
        _reap(proc, term_wait_s)
    return kill_group(proc, kill_wait_s)


def signal_members(pgid: int, sig: int, keep: Collection[int] = ()) -> int:
    """Send `sig` to every live member of group `pgid` but `keep` (the guard: its own group, minus
    itself and its ancestors); SIGTERM comes with SIGCONT. How many were signalled."""
    n = 0
    for pid in group_members(pgid):
        if pid in keep:
            continue
        try:
            os.kill(pid, sig)
            if sig == signal.SIGTERM:
                os.kill(pid, signal.SIGCONT)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def stop_members(pgid: int, keep: Collection[int], term_wait_s: float) -> None:
    """stop_group for a group we are in ourselves (killpg would hit us): SIGTERM the others, wait
    until they are gone or `term_wait_s` passed, SIGKILL what is left."""
    if signal_members(pgid, signal.SIGTERM, keep):
        end = time.monotonic() + term_wait_s
        while time.monotonic() < end and signal_members(pgid, 0, keep):
            time.sleep(0.05)
        signal_members(pgid, signal.SIGKILL, keep)
