"""`python -m trainstack.run.trainer_guard [options] -- TRAINER ARGV`: the first process of a trainer's process
group, and its watchdog.

The lifecycle (or a Ray job) starts the guard; the guard starts the trainer in its own process
group and stays there, so it works even when the launcher is frozen (SIGSTOP, Ctrl-Z) or dead:

- fencing: the run's lease travels in the environment (trainstack/fencing/fence.py). When another holder
  takes the lease, the group is killed at once; when the lease is about to expire because its
  holder stopped renewing it, the trainer gets SIGTERM (a final checkpoint) and is killed before
  the lease can expire, so no new holder ever races it.
- launcher gone (`--parent`): the trainer gets SIGTERM and its grace period, then SIGKILL.
- no orphans: when the trainer exits, whatever it started that is still in the group (reward
  servers, plugin subprocesses) is terminated, then killed.
- logs: the trainer's output always goes to `--log`; echoing it to our stdout never blocks (a
  reader that stops reading, or a closed pipe, loses console lines, never training time).
- Megatron's tracker write: under a lease, the trainer's PYTHONPATH starts with trainstack's site
  hook, which fences it in the trainer and every Ray actor it starts (trainstack/fencing/tracker_fence.py).
- secrets: `--secrets FILE` (mode 0600, JSON) is read into the trainer's environment, so they
  never travel through argv or a job system's logged environment, and removed once read.
- an orphan's end: when the guard stops the trainer itself (the lease lost or lapsing, the launcher
  gone), it records that in the run's events.jsonl: its launcher may never record anything.
- `--standby`: started before it is needed (trainstack/launch/standby.py), it waits on stdin for its
  arguments, environment and working directory, then is that guard.
- `--remove DIR`: removed when the group is gone (a Ray head's temp dir: the guard also runs the
  Ray heads trainstack starts, so they die with their launcher, trainstack/launch/ray_start.py).

Exit code: the trainer's; 128+N when it died of signal N; trainstack.fencing.fence.EXIT_FENCED when the
guard stopped it for the lease, or it failed while its lease belonged to another holder.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from trainstack.fencing.fence import EXIT_FENCED, Fence
from trainstack.procgroup import die_with_parent, signal_members, stop_members, wait_exit

POLL_S = 0.25
STANDBY_IDLE_S = 30.0  # a standby guard not handed a start by then leaves (trainstack/launch/standby.py)
HEARTBEAT_S = 5.0  # the trainer's heartbeat (liveness.py judges it stale after max(lease TTL, 3 beats))


def _stopped(pid: int) -> bool:
    """Is the process stopped (SIGSTOP, SIGTSTP: state T/t in /proc)? False where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _say(msg: str, log) -> None:
    line = f"[trainstack guard {os.getpid()}] {msg}\n".encode()
    for out in (log, None):
        try:
            if out is None:
                os.write(2, line)
            else:
                out.write(line)
                out.flush()
        except OSError:
            pass


def _ancestors() -> set[int]:
    """This process and its ancestors (a job system's wrapper shell may share our group)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                stat = f.read()
            pid = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def signal_group(sig: int, keep: set[int]) -> int:
    """Send `sig` to every live member of our process group but `keep`; how many were signalled."""
    return signal_members(os.getpgrp(), sig, keep)


class Guard:
    def __init__(self, argv: list[str], log_path: str | None, grace_s: float, parent: int | None,
                 secrets_file: str | None, cwd: str | None):
        self.argv = argv
        self.grace_s = grace_s
        self.parent = parent
        self.fence = Fence.from_env()
        self.log = None
        if log_path:
            try:
                self.log = open(log_path, "ab")
            except OSError as ex:  # a run dir this host cannot write (a remote job): console only
                _say(f"cannot write {log_path} ({ex}); the trainer's output goes to stdout only", None)
        self.keep = _ancestors()
        self.stop_reason: str | None = None
        self.fenced = False
        self.deadline: float | None = None
        self.next_beat = 0.0
        self.echo = True
        env = dict(os.environ)
        if secrets_file:
            import json

            with open(secrets_file, encoding="utf-8") as f:  # missing: fail before the trainer starts
                env.update({str(k): str(v) for k, v in json.load(f).items()})
            try:  # read once, by its one reader: it never outlives the start, whoever dies later
                os.unlink(secrets_file)
            except OSError:
                pass
        from trainstack.secrets import is_secret_name

        # the trainer's output is scrubbed of these before it reaches the log or the console (a plugin's
        # exception that prints a token must not land in logs/trainer.log)
        self.secret_values = tuple(v for k, v in env.items() if v and is_secret_name(k))
        if self.fence is not None:  # Megatron's tracker write fenced too (trainstack/fencing/tracker_fence.py)
            from trainstack.fencing.tracker_fence import trainer_pythonpath

            env["PYTHONPATH"] = trainer_pythonpath(env.get("PYTHONPATH"))
        try:
            os.set_blocking(1, False)
        except OSError:
            pass
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                     preexec_fn=die_with_parent)
        self.keep.discard(self.proc.pid)
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            line = self._scrub(line)
            if self.log is not None:
                try:
                    self.log.write(line)
                    self.log.flush()
                except OSError:
                    pass
            if self.echo:
                try:
                    os.write(1, line)
                except BlockingIOError:
                    pass  # the reader is not reading: drop console output, keep training
                except OSError:
                    self.echo = False  # closed pipe: the log keeps everything

    def _scrub(self, line: bytes) -> bytes:
        """One line of the trainer's output without a secret's value (trainstack/secrets.py scrub)."""
        from trainstack.secrets import scrub

        text = line.decode("utf-8", "surrogateescape")
        clean = scrub(text, extra=self.secret_values, env={})
        return line if clean == text else clean.encode("utf-8", "surrogateescape")

    def request_stop(self, reason: str, hard: bool) -> None:
        if hard and not self.fenced:
            self.fenced = True
            _say(f"stopping the trainer now: {reason}", self.log)
            signal_group(signal.SIGKILL, self.keep)
            return
        if self.stop_reason is None:
            self.stop_reason = reason
            _say(f"stopping the trainer (SIGTERM, {self.grace_s:.0f} s grace): {reason}", self.log)
            signal_group(signal.SIGTERM, self.keep)
            self.deadline = time.monotonic() + self.grace_s

    def on_signal(self, signum: int, _frame) -> None:
        _say(f"{signal.Signals(signum).name}: passed on to the trainer ({self.grace_s:.0f} s grace)", self.log)
        if self.deadline is None:
            self.deadline = time.monotonic() + self.grace_s
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def beat(self) -> None:
        """The trainer's heartbeat in the run dir (trainstack/run/rundir/liveness.py): written every HEARTBEAT_S
        while the trainer process is not stopped, so a frozen trainer (SIGSTOP, Ctrl-Z of its group)
        under a live launcher shows `stale`, not `running` forever. Best effort: a full disk skips it."""
        if self.fence is None or time.monotonic() < self.next_beat:
            return
        self.next_beat = time.monotonic() + float(os.environ.get("TRAINSTACK_TRAINER_HEARTBEAT_S") or HEARTBEAT_S)
        if _stopped(self.proc.pid):
            return
        import json

        from trainstack.run.rundir import atomic_write
        from trainstack.storage.layout import TRAINER_HEARTBEAT

        run_dir = os.path.dirname(os.path.abspath(self.fence.lease_file))
        if not os.path.isdir(run_dir):  # a host that does not share the run dir: nothing to write into
            return
        try:
            from pathlib import Path

            atomic_write(Path(run_dir) / TRAINER_HEARTBEAT,
                         json.dumps({"pid": self.proc.pid, "epoch": self.fence.epoch, "time": time.time()}))
        except OSError:
            pass

    def watch(self) -> None:
        margin = (self.fence.margin_s if self.fence else 0) + self.grace_s + 2 * POLL_S + 1
        while self.proc.poll() is None:
            self.beat()
            if self.parent is not None and os.getppid() != self.parent:
                self.request_stop(f"its launcher (pid {self.parent}) is gone", hard=False)
            if self.fence is not None and not self.fenced:
                why = self.fence.superseded()
                if why:
                    self.request_stop(why, hard=True)
                elif self.stop_reason is None and (why := self.fence.problem(margin_s=margin)):
                    self.request_stop(why, hard=False)
            if self.deadline is not None and time.monotonic() > self.deadline:
                signal_group(signal.SIGKILL, self.keep)
            wait_exit(self.proc, POLL_S)  # returns when the trainer exits: its end is not held up a period

    def finish(self, remove: list[str] | None = None) -> int:
        code = self.proc.wait()
        stop_members(os.getpgrp(), self.keep, 2.0)  # orphans of the trainer: reward servers, plugin children
        self.pump.join(timeout=5)
        for path in remove or ():  # what its starter made for it (a Ray head's temp dir): gone with it
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        if self.fenced or (self.fence is not None and (self.stop_reason or code != 0) and self.fence.superseded()):
            result = EXIT_FENCED  # a trainer that failed because it was fenced (its save raised Fenced) too
        else:
            result = 128 - code if code < 0 else code
        if self.stop_reason is not None or self.fenced:
            self._record_end(result)
        return result

    def _record_end(self, result: int) -> None:
        """The guard stopped the trainer itself (lease lost or lapsing, launcher gone): its launcher may
        be dead or frozen and record nothing, so the guard writes the end into the run's events."""
        if self.fence is None:
            return
        try:
            from trainstack.run.rundir import RunDir

            RunDir(os.path.dirname(os.path.abspath(self.fence.lease_file))).event(
                "trainer_stopped_by_guard", reason=self.stop_reason or "superseded", code=result,
                lease_epoch=self.fence.epoch)
        except Exception as ex:  # a run dir this host cannot write: the log still says it
            _say(f"could not record the trainer's end in the run dir ({ex})", self.log)


def serve_standby() -> int:
    """`--standby` (trainstack/launch/standby.py): started before the launcher needs a guard, wait on stdin
    for the start (one JSON line: the guard's arguments, environment, working directory), then be that
    guard. Exit 0 at EOF (the launcher left without a trainer for it) or after STANDBY_IDLE_S without one."""
    import json
    import select

    try:
        idle_s = float(os.environ.get("TRAINSTACK_GUARD_STANDBY_IDLE_S") or STANDBY_IDLE_S)
    except ValueError:
        idle_s = STANDBY_IDLE_S
    ready, _, _ = select.select([0], [], [], idle_s)
    line = b""
    while ready:
        more = os.read(0, 1 << 20)
        line += more
        if not more or line.endswith(b"\n"):
            break
    if not line.endswith(b"\n"):
        return 0
    start = json.loads(line)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nothing more comes on stdin: the trainer reads EOF there, as from a closed pipe
    os.close(devnull)
    os.chdir(start["cwd"])
    os.environ.clear()
    os.environ.update(start["env"])
    return main(start["args"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--standby"]:
        return serve_standby()
    if "--" not in argv:
        print("usage: python -m trainstack.run.trainer_guard [--log F] [--grace S] [--parent PID] [--secrets F] [--cwd D] [--remove D] "
              "-- TRAINER ARGV", file=sys.stderr)
        return 2
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="trainstack.run.trainer_guard")
    p.add_argument("--log")
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("--parent", type=int)
    p.add_argument("--secrets")
    p.add_argument("--cwd")
    p.add_argument("--remove", action="append", default=[], help="a directory to remove once the group is gone")
    opts = p.parse_args(argv[:split])
    guard = Guard(argv[split + 1:], opts.log, opts.grace, opts.parent, opts.secrets, opts.cwd)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, guard.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    guard.watch()
    return guard.finish(opts.remove)


if __name__ == "__main__":
    sys.exit(main())
