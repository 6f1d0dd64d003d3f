"""The trainer as a process on this machine: its own process group, under trainstack.run.trainer_guard.

What the local launcher runs and what the default `Launcher.execute` hands the lifecycle: the guard
writes logs/trainer.log, fences the group against the run's lease, stops it if the launcher dies, and
reaps whatever the trainer left in the group. Signals go to the whole process group, never by name
(trainstack/procgroup.py). The console echo never blocks the trainer.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from trainstack.launch import standby
from trainstack.procgroup import REAP_WAIT_S, kill_group, stop_group, wait_exit

if TYPE_CHECKING:
    from trainstack.run.lifecycle import StartRunner
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec


def start_local_process(spec: "RunSpec") -> "StartRunner":
    cmd = spec.slime_command()

    def start(env: dict[str, str], rundir: "RunDir") -> "TrainerProcess":
        return TrainerProcess(guarded(cmd.full_argv(), spec.resume.grace_s, rundir.trainer_log), env, cmd.cwd,
                              spec.resume.grace_s)

    return start


def guarded(argv: list[str], grace_s: float, log: Path | None, secrets: Path | None = None) -> list[str]:
    """The trainer's argv under trainstack.run.trainer_guard (this Python: it has trainstack)."""
    opts = ["--grace", str(grace_s), "--parent", str(os.getpid())]
    if log is not None:
        opts += ["--log", str(log)]
    if secrets is not None:
        opts += ["--secrets", str(secrets)]
    return [*standby.guard_command(), *opts, "--", *argv]


class TrainerProcess:
    """The guard (and the trainer under it) in a new session: signals go to the whole group. The guard
    started in standby while the launcher composed is taken when there is one (trainstack/launch/standby.py)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, grace_s: float):
        self.grace_s = grace_s
        self.signalled: int | None = None
        self._stopper: threading.Thread | None = None
        guard = standby.guard_command()
        taken = standby.take(argv[len(guard):], env, cwd) if argv[:len(guard)] == guard else None
        self.proc = taken or subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid: int | None = self.proc.pid
        self._echo = True
        self._pump = threading.Thread(target=self._tee, daemon=True)
        self._pump.start()

    def _tee(self) -> None:
        """Console echo of the guard's output, rollout lines as progress (trainstack/terminal/console.py); the guard
        keeps the log, every line of it."""
        from trainstack.terminal.console import for_stdout

        assert self.proc.stdout is not None
        console = for_stdout(sys.stdout)
        for line in iter(self.proc.stdout.readline, b""):
            if not self._echo:
                continue
            try:
                console.line(line)
            except (OSError, ValueError):
                self._echo = False  # `| head` closed the pipe: keep draining so the trainer never blocks
        try:
            console.close()
        except (OSError, ValueError):
            pass

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the trainer to stop (it checkpoints on SIGTERM/SIGINT); the group is killed after the
        grace period (procgroup.stop_group, in a thread: a signal handler must not block)."""
        self.signalled = self.signalled or signum
        if self.proc.poll() is None and self._stopper is None:
            sig = signal.SIGTERM if signum == signal.SIGHUP else signum
            self._stopper = threading.Thread(target=stop_group, args=(self.proc, self.grace_s + 2, REAP_WAIT_S, sig),
                                             daemon=True)
            self._stopper.start()

    def wait(self) -> int:
        while not wait_exit(self.proc, 0.1):  # woken by the guard's exit, not by the next 0.1 s tick
            pass
        kill_group(self.proc)  # anything left in the group goes with it
        self._pump.join(timeout=5)
        return self.proc.returncode
