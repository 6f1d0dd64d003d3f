"""Local launcher: the trainer in its own process group on this machine.

Order of a launch: take the run's lease (one writer per run) -> plan resume (fresh / resume /
finished / refuse) -> write the run directory -> start the trainer in a new session, teeing its
output to the console and logs/ -> forward SIGINT/SIGTERM, give it `resume.grace_s` for a final
checkpoint, then kill the group -> record exit, status and last metrics -> release the lease.
Only processes this launcher started are ever signalled.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainstack.checkpoints import inspect
from trainstack.lease import Lease, LeaseHeld
from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun
from trainstack.resume import FINISHED, RESUME, ResumePlan, plan
from trainstack.preflight import prepare_env_data
from trainstack.rundir import RunDir

EXIT_BUSY = 3  # another launch holds the run


def launch_env(run: ResolvedRun, cmd: SlimeCommand, rundir: RunDir) -> dict[str, str]:
    """The trainer's environment: ours + the rendered runtime env (+ offline W&B without a key)."""
    env = {**os.environ, **cmd.env, "TRAINSTACK_METRICS_FILE": str(rundir.metrics_file),
           "TRAINSTACK_RUN_ID": run.run_id}
    if run.args.get("use_wandb") and not os.environ.get("WANDB_API_KEY") and not run.args.get("wandb_mode"):
        env["WANDB_MODE"] = "offline"
    return env


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


def final_state(code: int, signalled: int | None) -> str:
    if signalled is not None:
        return "interrupted"
    if code != 0:
        return "failed"
    return "finished"


def launch_local(run: ResolvedRun, cmd: SlimeCommand) -> int:
    def start(env: dict[str, str], rundir: RunDir) -> TrainerProcess:
        return TrainerProcess(cmd.full_argv(), env, cmd.cwd, rundir.logs / "trainer.log", run.resume.grace_s)

    return launch_run(run, cmd, start)


def launch_run(run: ResolvedRun, cmd: SlimeCommand, start) -> int:
    """Lease -> resume plan -> run dir -> start(env, rundir) -> wait -> record. `start` returns a
    runner with .stop(signum), .wait() -> exit code and .signalled (local process or Ray job)."""
    rundir = RunDir(run.run_dir)
    try:
        lease = Lease.acquire(rundir.lease_file, ttl_s=run.resume.lease_ttl_s)
    except LeaseHeld as held:
        print(f"trainstack: run {run.run_id} is already running ({held.holder.describe()}); nothing was launched.\n"
              f"  fix: wait for it, stop it (Ctrl-C in its terminal / kill -TERM -{held.holder.pid}), or use another "
              f"run_id. A dead holder's lease is taken over {run.resume.lease_ttl_s:.0f} s after its last heartbeat.",
              file=sys.stderr)
        return EXIT_BUSY
    try:
        resume_plan = plan(run, rundir)  # may raise ConfigErrors: reported by the app, lease released below
        return _run_with_lease(run, cmd, rundir, lease, resume_plan, start)
    finally:
        lease.release()


def _run_with_lease(run: ResolvedRun, cmd: SlimeCommand, rundir: RunDir, lease: Lease, rp: ResumePlan, start) -> int:
    if rp.action == FINISHED:
        rundir.event("finished", latest_checkpoint=rp.checkpoint.latest_complete, num_rollout=rp.num_rollout)
        rundir.update_status(run_id=run.run_id, state="finished", last_checkpoint=rp.checkpoint.latest_complete,
                             num_rollout=rp.num_rollout)
        print(f"trainstack: run {run.run_id} is finished: its checkpoint at rollout {rp.checkpoint.latest_complete} "
              f"covers num_rollout={rp.num_rollout}. Nothing to train.\n  to continue it, raise the rollout count, "
              f"e.g. env.num_rollout={(rp.num_rollout or 0) * 2} (same run_id, resumes from "
              f"{rp.checkpoint.latest_complete + 1})", file=sys.stderr)
        return 0
    prepare_env_data(run)  # (already run by the preflight on this host; idempotent, for callers without it)
    rundir.write_spec(run, cmd)
    if rp.action == RESUME:
        rundir.event("resume", from_rollout=rp.from_rollout, checkpoint=rp.checkpoint.latest_complete,
                     allowed_changes={k: list(v) for k, v in (rp.changes or {}).items()}, lease_epoch=lease.record.epoch)
    else:
        rundir.event("launch", lease_epoch=lease.record.epoch)
    print(f"trainstack: {run.run_id}: {rp.describe()}; run dir {run.run_dir}", file=sys.stderr, flush=True)
    rundir.update_status(run_id=run.run_id, state="running", num_rollout=rp.num_rollout, host=lease.record.host,
                         pid=os.getpid(), last_checkpoint=rp.checkpoint.latest_complete)
    trainer = start(launch_env(run, cmd, rundir), rundir)

    def on_signal(signum, _frame):
        rundir.event("signal", signal=signal.Signals(signum).name)
        trainer.stop(signum)

    def on_lease_lost():
        rundir.event("lease_lost")
        print(f"trainstack: lost the lease of {run.run_id}; stopping the trainer", file=sys.stderr, flush=True)
        trainer.stop(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    lease.start_heartbeat(on_lost=on_lease_lost)
    try:
        code = trainer.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    state = inspect(run.args.get("save") or str(rundir.checkpoints))
    latest, _ = rundir.last_metrics()
    rundir.event("exit", code=code, signal=trainer.signalled and signal.Signals(trainer.signalled).name,
                 latest_checkpoint=state.latest_complete)
    rundir.update_status(state=final_state(code, trainer.signalled),
                         last_checkpoint=state.latest_complete, last_metrics=latest, exit_code=code)
    if trainer.signalled is not None and code != 0:
        return 128 + trainer.signalled if code < 0 else code
    return code
