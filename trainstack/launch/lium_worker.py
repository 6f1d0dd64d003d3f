"""`python -m trainstack.launch.lium_worker`: the entrypoint on a Lium pod. It trains only while it holds the
run's lease from the commander.

1. Take the lease for the epoch the commander started us with (a superseded epoch: exit at once).
2. Run the stored spec with `trainstack exec RUN_DIR` (lifecycle: run-dir lease, resume plan from
   the newest complete checkpoint on the volume, or the Hub when the plan finds one there; events,
   status) in its own process group. The run-dir lease of an older epoch's trainer is taken over:
   the commander's newer epoch proves that trainer was superseded.
3. Renew every heartbeat, sending progress (last checkpoint, Hub commit, reward) and what the run's
   metrics.jsonl gained (the commander keeps a copy for the submit host: trainstack/metrics/relay.py).
   - renewal refused (superseded, expired, force-released): SIGKILL the trainer's group at once:
     the run belongs to someone else now, and a final checkpoint would be a second writer;
   - commander unreachable for longer than the deadline (< TTL): stop the trainer (SIGTERM, a
     short grace, then SIGKILL of the group) and keep trying; if the lease is still ours when
     the commander answers, start `trainstack exec` again (it resumes);
   - woken after a freeze longer than the TTL: SIGKILL first, ask after;
   - the run should stop (cancel, pause, spend limit): SIGTERM -> final checkpoint -> report.
4. SIGTERM to the worker (the pod is going away): the trainer checkpoints within its grace
   period, the worker reports PREEMPTED and releases.
The worker reports how the trainer ended (finished / failed / stopped) with the tail of its log, and
exec's own stderr (logs/exec.stderr.log: a failed prepare step or host check before the trainer) with
its first error line as the reason.

Environment (set by the commander through the exec environment, never files):
TRAINSTACK_COMMANDER_URL, TRAINSTACK_COMMANDER_TOKEN, TRAINSTACK_RUN_ID, TRAINSTACK_COMMANDER_EPOCH,
TRAINSTACK_POD_ID, TRAINSTACK_RUN_DIR; plus the forwarded secrets (WANDB_API_KEY, HF_TOKEN, ...).
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainstack.commander.client import CommanderClient, CommanderError, Unreachable
from trainstack.fencing.fence import ENV_COMMANDER_EPOCH, EXIT_FENCED, Epoch
from trainstack.procgroup import die_with_parent, kill_group, stop_group

EXIT_SUPERSEDED = 4  # the worker's own exit: the commander refused its epoch (EXIT_FENCED is its trainer's)


def say(msg: str) -> None:
    print(f"[worker {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Trainer:
    """`trainstack exec RUN_DIR` in its own session; signals go to its whole process group."""

    def __init__(self, run_dir: str, env: dict[str, str]):
        argv = [sys.executable, "-m", "trainstack", "exec", run_dir, "--quiet"]
        # exec's stderr (its errors before the trainer starts: prepare, host checks) goes to a file on
        # the run's volume, so the report carries them (the trainer's own log is empty then)
        from trainstack.storage import layout

        self.stderr_path = Path(run_dir) / layout.LOGS / layout.EXEC_STDERR_LOG
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "ab") as err:
            self.stderr_from = err.tell()
            self.proc = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=die_with_parent,
                                         stdin=subprocess.DEVNULL, stderr=err)
        self.stop_reason: str | None = None

    def stderr_tail(self, n: int = 16 * 1024) -> str:
        """What this exec wrote to stderr (its last n bytes)."""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(self.stderr_from, f.seek(0, os.SEEK_END) - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, reason: str) -> int:
        """SIGKILL the whole group now (no checkpoint)."""
        self.stop_reason = self.stop_reason or reason
        kill_group(self.proc)
        return self.proc.wait()

    def stop(self, reason: str, grace_s: float) -> int:
        """SIGTERM (the trainer checkpoints), then SIGKILL of the group after grace_s."""
        self.stop_reason = self.stop_reason or reason
        stop_group(self.proc, term_wait_s=grace_s)
        return self.proc.wait()


def failure_reason(stderr: str) -> str:
    """The line that says why exec failed: its first `error:` line, else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    first = next((ln for ln in lines if "error:" in ln), lines[-1] if lines else "")
    return first[:300]


_TRACES: dict[str, tuple[tuple, Any]] = {}


def _stat(path: Path) -> tuple:
    try:
        st = path.stat()
        return st.st_size, st.st_mtime_ns
    except OSError:
        return ()


def _traces(rd: Any) -> Any:
    """The run's traces, re-read only when metrics.jsonl, the checkpoint tracker or the spec changed: every lease
    renewal reports them, and a multi-day run's metrics file is megabytes."""
    from trainstack.storage import layout
    from trainstack.run.rundir.progress import progress as traces

    key = (_stat(rd.metrics_file), _stat(rd.checkpoints / layout.TRACKER), _stat(rd.spec_file))
    hit = _TRACES.get(str(rd.path))
    if hit is None or hit[0] != key:
        hit = _TRACES[str(rd.path)] = (key, traces(rd.path))
    return hit[1]


def progress(run_dir: Path) -> dict[str, Any]:
    """What the commander shows for the run: the run dir's own traces (trainstack/run/rundir/progress.py)."""
    from trainstack.run.rundir import RunDir

    from trainstack.run.rundir.progress import ReportedProgress

    rd = RunDir(run_dir)
    st = rd.status()
    done = _traces(rd)
    hub = st.get("hub")
    hub = hub if isinstance(hub, dict) else {}
    return ReportedProgress(state=st.get("state"), last_checkpoint=done.last_checkpoint, rollouts=done.rollouts,
                            num_rollout=done.target or st.get("num_rollout"), reward=done.reward,
                            hub_commit=hub.get("commit") or None, hub_pushed=hub.get("last_pushed"),
                            metrics=st["last_metrics"] if isinstance(st.get("last_metrics"), dict) else None).to_json()


def log_tail(run_dir: Path, n: int = 32 * 1024) -> str:
    from trainstack.run.rundir import RunDir

    path = RunDir(run_dir).trainer_log
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def take_over_run_dir_lease(run_dir: Path, host: str, epoch: Epoch) -> bool:
    """The run dir's lease of a trainer from an older commander epoch (another pod) is moved aside: we
    hold the commander's newer epoch, so that trainer was superseded (and with write fencing it can no
    longer publish). Without this a replacement would wait out that lease's TTL. A lease that records
    our epoch or a newer one is never taken (we would be the superseded writer); one that records
    none (written outside the commander) is taken when another host holds it."""
    from trainstack.fencing.lease import evict, read_record
    from trainstack.run.rundir import RunDir

    path = RunDir(run_dir).lease_file
    rec = read_record(path)
    if rec is None or rec.host == host or rec.expires_at <= time.time():
        return False
    if rec.commander_epoch is not None and rec.commander_epoch >= epoch:
        return False
    say(f"taking over the run-dir lease of {rec.host} (lease epoch {rec.epoch}, commander epoch "
        f"{rec.commander_epoch}): superseded by our commander epoch {epoch}")
    evict(path, rec)
    return True


class Worker:
    def __init__(self, env: dict[str, str]):
        self.url = env["TRAINSTACK_COMMANDER_URL"]
        self.run_id = env["TRAINSTACK_RUN_ID"]
        self.epoch: Epoch = int(env[ENV_COMMANDER_EPOCH])
        self.pod_id = env.get("TRAINSTACK_POD_ID", "local")
        self.run_dir = Path(env["TRAINSTACK_RUN_DIR"])
        self.holder = f"{self.pod_id}/{os.getpid()}"
        self.client = CommanderClient(self.url, env["TRAINSTACK_COMMANDER_TOKEN"], timeout=5)
        self.child_env = {k: v for k, v in env.items() if k != "TRAINSTACK_COMMANDER_TOKEN"}
        self.child_env["TRAINSTACK_HOSTNAME"] = f"lium-{self.pod_id}"
        self.child_env.setdefault("PYTHONUNBUFFERED", "1")
        self.sigterm = threading.Event()
        self.ttl = self.heartbeat = self.deadline = 0.0
        self.grace = 30.0
        self.metrics_at: int | None = -1  # the commander's copy of metrics.jsonl in bytes (-1: resend it whole;
        # None: this commander keeps none)

    # ------------------------------------------------------------------ commander calls
    def acquire(self, give_up_s: float = 300.0) -> bool:
        end = time.monotonic() + give_up_s
        while time.monotonic() < end and not self.sigterm.is_set():
            try:
                got = self.client.post(f"/v1/runs/{self.run_id}/lease/acquire",
                                       {"epoch": self.epoch, "holder": self.holder, "pod_id": self.pod_id})
            except Unreachable as ex:
                say(f"commander unreachable ({ex.detail}); retrying")
                time.sleep(2)
                continue
            except CommanderError as ex:
                say(f"lease refused: {ex.detail}")
                return False
            self.ttl, self.heartbeat, self.deadline = got["ttl_s"], got["heartbeat_s"], got["deadline_s"]
            say(f"lease of {self.run_id} epoch {self.epoch} (ttl {self.ttl:.0f} s, deadline {self.deadline:.0f} s)")
            return True
        return False

    def renew(self) -> dict[str, Any]:
        got = self.metrics_chunk()
        answer = self.client.post(f"/v1/runs/{self.run_id}/lease/renew", {
            "epoch": self.epoch, "holder": self.holder, "progress": progress(self.run_dir), "metrics": got})
        self.metrics_sent(got, answer)
        return answer

    def metrics_chunk(self) -> dict[str, Any] | None:
        """What metrics.jsonl gained since the commander's copy (trainstack/metrics/relay.py)."""
        from trainstack.metrics.relay import chunk
        from trainstack.storage import layout

        return None if self.metrics_at is None else chunk(self.run_dir / layout.METRICS, self.metrics_at)

    def metrics_sent(self, got: dict[str, Any] | None, answer: dict[str, Any]) -> None:
        size = answer.get("metrics_bytes") if isinstance(answer, dict) else None
        if got is not None and not isinstance(size, int):  # a commander that keeps no metrics: stop sending them
            self.metrics_at = None
        elif isinstance(size, int) and self.metrics_at is not None:
            self.metrics_at = size

    def flush_metrics(self) -> None:
        """Before the last report: what is left of metrics.jsonl, a chunk per renewal (the lease is still ours)."""
        for _ in range(64):
            if self.metrics_chunk() is None:
                return
            try:
                self.renew()
            except CommanderError:
                return

    def report(self, state: str, code: int | None, message: str, stderr: str = "") -> None:
        self.flush_metrics()
        tail = log_tail(self.run_dir) + (f"\n--- trainstack exec's stderr ---\n{stderr}" if stderr.strip() else "")
        body = {"epoch": self.epoch, "holder": self.holder, "state": state, "exit_code": code, "message": message,
                "progress": progress(self.run_dir), "log_tail": tail}
        for _ in range(10):
            try:
                self.client.post(f"/v1/runs/{self.run_id}/lease/report", body)
                say(f"reported {state} (exit {code})")
                return
            except Unreachable:
                time.sleep(1)
            except CommanderError as ex:
                say(f"report refused: {ex.detail}")
                return

    # ------------------------------------------------------------------ the loop
    def start_trainer(self) -> Trainer:
        from trainstack.run import spec as runspec

        try:
            self.grace = float(runspec.load(self.run_dir).resume.grace_s)
        except Exception:  # noqa: BLE001 - exec reports a bad spec itself
            pass
        take_over_run_dir_lease(self.run_dir, self.child_env["TRAINSTACK_HOSTNAME"], self.epoch)
        if self.metrics_at is not None:
            self.metrics_at = -1  # a (re)started trainer may rewrite metrics.jsonl: the commander's copy is sent anew
        say(f"starting trainstack exec {self.run_dir}")
        return Trainer(str(self.run_dir), self.child_env)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.sigterm.set())
        signal.signal(signal.SIGINT, lambda *_: self.sigterm.set())
        if not self.acquire():
            return EXIT_SUPERSEDED
        trainer: Trainer | None = self.start_trainer()
        last_ok = time.monotonic()
        busy_retries = 0
        while True:
            woke = time.monotonic()
            if woke - last_ok > self.ttl and trainer is not None and trainer.alive():
                trainer.kill("no renewal for longer than the TTL (frozen?)")  # maybe superseded: no checkpoint
                say("no renewal for longer than the lease TTL: killed the trainer without a checkpoint")
                trainer = None
            if self.sigterm.is_set():
                code = trainer.stop("preempted", self.grace + 5) if trainer else None
                self.report("preempted", code, "worker got SIGTERM (pod going away)")
                return 0
            if trainer is not None and not trainer.alive():
                code = trainer.proc.returncode
                from trainstack.run.lifecycle import EXIT_BUSY

                if code == EXIT_BUSY and busy_retries < 20:  # the run-dir lease is still being released
                    busy_retries += 1
                    time.sleep(1)
                    trainer = self.start_trainer()
                    continue
                if code == EXIT_FENCED:  # the run-dir lease went to another writer: not the run's failure
                    self.report("preempted", code, "trainstack exec was fenced (another writer holds the run dir)")
                    return EXIT_SUPERSEDED
                state = "finished" if code == 0 and progress(self.run_dir).get("state") == "finished" else "failed"
                stderr = trainer.stderr_tail()
                sys.stderr.write(stderr)  # the worker's log shows it too
                why = failure_reason(stderr) if state == "failed" else ""
                self.report(state, code, f"trainstack exec exited with {code}" + (f": {why}" if why else ""), stderr)
                return 0 if state == "finished" else 1
            try:
                answer = self.renew()
                last_ok = time.monotonic()
            except CommanderError as ex:
                if isinstance(ex, Unreachable):
                    if time.monotonic() - last_ok > self.deadline and trainer is not None:
                        say(f"commander unreachable for {time.monotonic() - last_ok:.0f} s (> deadline "
                            f"{self.deadline:.0f} s): stopping the trainer")
                        trainer.stop("commander unreachable", max(1.0, self.ttl - self.deadline))
                        trainer = None
                    time.sleep(min(1.0, self.heartbeat))
                    continue
                say(f"lease lost: {ex.detail}; killing the trainer without a checkpoint")
                if trainer is not None:
                    trainer.kill("lease lost")
                return EXIT_SUPERSEDED
            desired = answer.get("desired")
            if desired != "running":
                say(f"the run should be {desired}: stopping the trainer (final checkpoint)")
                code = trainer.stop(str(desired), self.grace + 5) if trainer else None
                self.report("stopped", code, f"stopped: run {desired}")
                return 0
            if trainer is None:  # the commander is back and the lease is still ours
                say("lease renewed after an outage: starting the trainer again (it resumes)")
                trainer = self.start_trainer()
            self.sigterm.wait(self.heartbeat)


def main() -> int:
    missing = [k for k in ("TRAINSTACK_COMMANDER_URL", "TRAINSTACK_COMMANDER_TOKEN", "TRAINSTACK_RUN_ID",
                           ENV_COMMANDER_EPOCH, "TRAINSTACK_RUN_DIR") if not os.environ.get(k)]
    if missing:
        print(f"trainstack worker: missing {', '.join(missing)} in the environment (the commander sets them when it "
              "starts the worker on a pod)", file=sys.stderr)
        return 2
    run_id = os.environ["TRAINSTACK_RUN_ID"]
    lock_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"trainstack-worker-{run_id}.lock"
    lock = open(lock_path, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        say(f"another worker of {run_id} runs on this pod; exiting")
        return 0
    return Worker(dict(os.environ)).run()


if __name__ == "__main__":
    sys.exit(main())
