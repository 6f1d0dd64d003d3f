"""Files written safely, for the run dir and its spec: atomic replaces, locks, appended lines.

Writes are atomic (a temp name private to the writing thread + os.replace) so a reader (or a crash)
never sees half a file; a lock is a threading.Lock per lock file plus flock across processes; a line is
appended in one O_APPEND write under flock. Low on purpose: the run spec writes itself with these
without importing the run dir.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import itertools
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from trainstack.secrets import scrub


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


_TMP_SEQ = itertools.count()
_THREAD_LOCKS: dict[str, threading.Lock] = {}  # per lock file: nesting two different locks cannot deadlock
_THREAD_LOCKS_GUARD = threading.Lock()


def temp_name(path: Path) -> Path:
    """A temp name next to `path` that no other process, thread or call uses: pid + thread + counter."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_TMP_SEQ)}.tmp")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(scrub(text))  # the last net: no secret value reaches a run-dir file
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Exclusive across threads (a lock per lock file) and processes (flock on `lock_file`). A filesystem
    without flock (ENOLCK) still serialises this process's threads."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCKS_GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(os.path.abspath(lock_file), threading.Lock())
    with thread_lock, open(lock_file, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError:
            pass
        try:
            yield
        finally:
            try:
                fcntl.flock(f, fcntl.LOCK_UN)
            except OSError:
                pass


def append_line(path: Path, line: str) -> None:
    """One line at the end of `path` in one O_APPEND write under flock: concurrent writers (threads,
    processes, hosts on a shared filesystem where O_APPEND alone is not atomic) never interleave."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the flock
