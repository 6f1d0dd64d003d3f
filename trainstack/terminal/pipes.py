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
from typing import Any, Callable, NoReturn


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


def exit_now(code: Any = 0) -> NoReturn:
    """End a command-line process whose work is done: flush, run the atexit handlers, and leave without
    the interpreter's teardown, which frees every module and object one by one (a launch spent ~40 ms
    there after its trainer had ended; a dry run as long). Only for a script's top level (run.py,
    `trainstack`, `python -m trainstack`), never a library call. `code` as `sys.exit` takes it; anything
    but an int or None, another non-daemon thread still running, or a profiler, tracer or debugger
    (which write their results after the script) gets the normal exit."""
    import atexit
    import threading

    if code is None:
        code = 0
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    watched = sys.getprofile() is not None or sys.gettrace() is not None  # cProfile, coverage, a debugger
    if not isinstance(code, int) or isinstance(code, bool) or others or run_exitfuncs is None or watched:
        sys.exit(code)
    flush()
    run_exitfuncs()  # logging's shutdown, Ray's disconnect, multiprocessing's joins: as a normal exit runs them
    flush()
    os._exit(code & 0xFF)


def run_script(main: Callable[[], Any], returns_code: bool = False) -> NoReturn:
    """`main()` as a script's entry point, ended by `exit_now`: its SystemExit code, else its return value
    (`returns_code`: the `trainstack` command's code) or 0 (run.py ignores what the Hydra task returns)."""
    try:
        result = main()
    except SystemExit as ex:
        exit_now(ex.code)
    exit_now(result if returns_code else 0)
