"""A reader that leaves early (`python run.py --help | head`, `trainstack status | head`) ends the
command quietly: no `BrokenPipeError` traceback, no "Exception ignored ... BrokenPipeError" at exit,
and the exit code the command had anyway (0 when the error was only the reader leaving).

Python raises `BrokenPipeError` at the write (or the flush) that finds the pipe closed, wherever it
is; the entry points (`trainstack`, `run.py`, and Hydra's error reporter, which would print the
traceback of a task's write) run through `quietly`, which flushes before returning so the error
shows there and not at the interpreter's exit, then points the closed stream at /dev/null.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable


def silence() -> None:
    """Point stdout (and stderr when its reader left too) at /dev/null: nothing written to them fails
    any more, the interpreter's final flush included."""
    _to_devnull(sys.stdout)
    try:
        sys.stderr.flush()
    except BrokenPipeError:
        _to_devnull(sys.stderr)


def _to_devnull(stream: Any) -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture): nothing to point
        pass


def flush() -> None:
    """Flush stdout and stderr now, so a reader that left is found here (then silenced)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        silence()


def quietly(fn: Callable[[], Any]) -> Any:
    """`fn()`, ending quietly (0) when the reader of its output has left."""
    try:
        result = fn()
    except BrokenPipeError:
        silence()
        return 0
    except SystemExit:
        flush()
        raise
    flush()
    return result
