"""The trainer's guard, started before it is needed: its interpreter starts while the launcher composes.

A local launch runs the trainer under `trainstack.run.trainer_guard`, a fresh Python: ~45 ms of
interpreter start and imports between the launcher's last check and the trainer's start on a 2-core
machine. So `run.py` (and `trainstack run`) start the guard in standby first thing, when the command
line can launch (no flags, not `dry_run=true`): it starts on the other core while Hydra is imported and
the run is composed and checked, then waits on its stdin. The local launch hands it the start
(`take`: the guard's arguments, the environment and the working directory) and it becomes the guard
that `python -m trainstack.run.trainer_guard ARGS` in that directory with that environment would have
been, a child of this launcher in a session of its own.

A standby that is not handed a start exits: at EOF on its stdin (the launcher left: a dry run decided
by the config, a refusal, a remote launch, a crash; `release` at the end of `main`) or after its idle
limit (trainer_guard.STANDBY_IDLE_S: a launch that prepares its inputs for longer). `take` answers None
when the standby is gone, and the caller starts a fresh guard. `TRAINSTACK_GUARD_STANDBY=0` starts none.
May import: the stdlib only (it runs before anything else of the launcher).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

ENV = "TRAINSTACK_GUARD_STANDBY"
MODULE = "trainstack.run.trainer_guard"  # its `--standby` side is trainer_guard.serve_standby
_FALSE = ("false", "0", "no", "off", "null", "")
_WAITING: list[subprocess.Popen] = []


def guard_command() -> list[str]:
    """How the guard is started: this interpreter, `-m trainstack.run.trainer_guard` (then its arguments)."""
    return [sys.executable, "-m", MODULE]


def wanted(argv: list[str]) -> bool:
    """Can this command line launch a trainer here (judged from the line alone; the config decides later)?"""
    if os.environ.get(ENV) == "0":
        return False
    for arg in argv:
        if arg.startswith("-"):  # --help, --cfg, -m, ...: no launch of one run
            return False
        key, eq, value = arg.partition("=")
        if eq and key.lstrip("+~") == "dry_run" and value.strip().strip("'\"").lower() not in _FALSE:
            return False
    return True


def start(argv: list[str]) -> None:
    """Start the guard in standby for the command line `argv` (best effort: a launch never needs it)."""
    if _WAITING or not wanted(argv):
        return
    import subprocess  # here: `run.py --help` and the dry runs need none of it

    try:
        proc = subprocess.Popen([*guard_command(), "--standby"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError:
        return
    _WAITING.append(proc)


def take(guard_args: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen | None:
    """The standby, now the guard of `guard_args` with `env` in `cwd`; None when there is none to take."""
    if not _WAITING:
        return None
    import json

    proc = _WAITING.pop()
    assert proc.stdin is not None
    try:
        if proc.poll() is not None:
            raise BrokenPipeError
        proc.stdin.write(json.dumps({"args": guard_args, "env": env, "cwd": cwd}).encode() + b"\n")
        proc.stdin.close()
    except (OSError, ValueError):  # it left (its idle limit passed, killed): a fresh guard instead
        _let_go(proc)
        return None
    return proc


def release() -> None:
    """Let a standby that was not taken go (it exits at EOF)."""
    while _WAITING:
        _let_go(_WAITING.pop())


def _let_go(proc: subprocess.Popen) -> None:
    import subprocess

    for f in (proc.stdin, proc.stdout):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=0.2)
    except subprocess.TimeoutExpired:  # still importing: it reads EOF when it gets there
        pass
