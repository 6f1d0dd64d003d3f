"""Local launcher: the trainer in its own process group on this machine.

`submit` runs the stored command here and returns when it ends; the lifecycle around it
(lease, resume plan, events, status, signals) is `trainstack/lifecycle.py`. The trainer starts
in a new session, its output teed to the console and logs/trainer.log; signals go to its whole
process group, never by name, and it dies with the launcher (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack.launch.base import Launcher

if TYPE_CHECKING:
    from trainstack.lifecycle import StartRunner
    from trainstack.rundir import RunDir
    from trainstack.runspec import RunSpec


class LocalLauncher(Launcher):
    name = "local"
    waits = True


def start_local_process(spec: "RunSpec") -> "StartRunner":
    cmd = spec.slime_command()

    def start(env: dict[str, str], rundir: "RunDir") -> "TrainerProcess":
        return TrainerProcess(cmd.full_argv(), env, cmd.cwd, rundir.trainer_log, spec.resume.grace_s)

    return start


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL us if the launcher dies (Linux), so a SIGKILLed launcher
    never leaves an orphan trainer writing checkpoints while a relaunch takes the lease."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class TrainerProcess:
    """A child in its own session: signals go to its whole process group, never by name."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, log_path: Path, grace_s: float):
        self.grace_s = grace_s
        self.signalled: int | None = None
        self._deadline: float | None = None
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        self._pump = threading.Thread(target=self._tee, daemon=True)
        self._pump.start()

    def _tee(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            for sink in (sys.stdout.buffer, self._log):
                sink.write(line)
                sink.flush()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the trainer to stop (it checkpoints on SIGTERM/SIGINT); kill after the grace period."""
        self.signalled = self.signalled or signum
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass
            if self._deadline is None:
                self._deadline = time.monotonic() + self.grace_s

    def wait(self) -> int:
        while self.proc.poll() is None:
            if self._deadline is not None and time.monotonic() > self._deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
            time.sleep(0.1)
        try:  # grandchildren left in the group go with it
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._pump.join(timeout=5)
        self._log.close()
        return self.proc.returncode
