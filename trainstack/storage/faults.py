"""Storage faults: a write the filesystem refused (full disk, quota, read-only, permission denied,
I/O error), named the same way wherever it hits (launcher, trainer, Hub sync thread), with the fix
and exit code 5 (docs/resume.md, exit codes). Stdlib only: the trainer imports it.
"""
from __future__ import annotations

import errno
import os

EXIT_STORAGE = 5  # = trainstack.errors.EXIT_LAUNCHER: a failure outside the config
_NAMES = ("ENOSPC", "EDQUOT", "EROFS", "EIO", "EACCES", "EPERM")
STORAGE_ERRNOS = frozenset(getattr(errno, n) for n in _NAMES if hasattr(errno, n))


def is_storage_error(ex: BaseException) -> bool:
    """An OSError of the storage kinds, or torch's wrapper of one (torch.save raises RuntimeError
    "... file write failed" on a full disk)."""
    if isinstance(ex, OSError):
        return ex.errno in STORAGE_ERRNOS
    return isinstance(ex, RuntimeError) and "file write failed" in str(ex)


def hits(ex: BaseException, root: str | os.PathLike[str]) -> bool:
    """A storage fault of `root` (the run dir): any full disk, quota, read-only or I/O error; a permission
    error only when it names a path under `root` (elsewhere it is some other file's problem)."""
    if not is_storage_error(ex):
        return False
    if isinstance(ex, OSError) and ex.errno in (errno.EACCES, errno.EPERM):
        if not ex.filename:
            return False
        path, top = os.path.abspath(os.fsdecode(ex.filename)), os.path.abspath(os.fspath(root))
        return path == top or path.startswith(top + os.sep)
    return True


RESUMES = "then relaunch: the run resumes from its last complete checkpoint"


def fix_for(ex: BaseException, where: str, then: str = RESUMES) -> str:
    """What to do about it, by kind; `where`: the directory it hit (the run dir)."""
    code = ex.errno if isinstance(ex, OSError) else errno.ENOSPC
    if code == errno.EROFS:
        return f"remount {where} read-write, or set paths.runs_root to a writable disk; {then}"
    if code in (errno.EACCES, errno.EPERM):
        return f"make {where} writable for this user (chmod -R u+rwX {where}, or chown it), or set paths.runs_root " \
               f"elsewhere; {then}"
    if code == errno.EIO:
        return f"check the disk behind {where} (dmesg); {then}"
    return f"free space on that filesystem (df -h {where}); {then}"


def describe(ex: BaseException) -> str:
    """One line: what was refused, where."""
    if isinstance(ex, OSError):
        what = ex.strerror or str(ex)
        return f"{what} writing {ex.filename}" if ex.filename else what
    return f"{ex} (no space left on device?)"


def message(ex: BaseException, where: str) -> tuple[str, str]:
    """(problem, fix) for a storage fault under `where`."""
    return describe(ex), fix_for(ex, os.fspath(where))
