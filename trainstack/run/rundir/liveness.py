"""Whether a run that says "running" is running: judged by its lease and its holder's liveness.

status.json's "running" is written by the launcher that holds the lease; a launcher killed with
SIGKILL, or one that died on a full disk, never writes its final state. So a reader never takes
"running" on trust: it is true only while lease.json names a live holder (a heartbeat not expired;
on this host, the holder's pid alive). Otherwise the run is

- `stopping`: its launcher is gone, its trainer's group is finishing a final checkpoint (the guard);
- `stale`: its holder is dead or stopped renewing: the lease will lapse (or has), a relaunch resumes;
  or its holder is alive but the trainer is frozen: the guard's trainer heartbeat
  (`trainer_heartbeat.json`, one every 5 s while the trainer process is not stopped) is older than
  the lease TTL;
- `lost`: no live lease at all (lease.json deleted, or released without a final state): a relaunch resumes.

Each comes with the fix. Only "running" is judged: a final state (finished, failed, interrupted,
fenced) is the holder's own word. A run dir without a lease record or an epoch log (a launcher that
does not run the lifecycle here, e.g. a Lium pod's run reported by its commander) keeps its state.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.storage import layout

RUNNING = "running"
RELAUNCH = "relaunch to resume: trainstack exec {run_dir}"


@dataclass(frozen=True)
class Judged:
    state: str | None  # what status shows
    why: str = ""  # why it is not what status.json says
    fix: str = ""

    def text(self) -> str | None:
        return f"{self.state} ({self.why}; fix: {self.fix})" if self.why else self.state


def judge(run_dir: str | Path, status: dict[str, Any], now: float | None = None) -> Judged:
    """The run's state as status.json says it, corrected by its lease when it says "running"."""
    from trainstack.fencing.lease import hostname, pid_alive, read_record

    state = status.get("state")
    if state != RUNNING:
        return Judged(state)
    run_dir = Path(run_dir)
    fix = RELAUNCH.format(run_dir=run_dir)
    rec = read_record(run_dir / layout.LEASE)
    now = time.time() if now is None else now
    if rec is None:
        if (run_dir / layout.LEASE).exists() or (run_dir / layout.LEASE_EPOCHS).exists():
            return Judged("lost", "lease.json is gone or unreadable", fix)
        return Judged(state)  # no lifecycle ran here: the launcher's own status fills it in
    if rec.expires_at <= 0:
        return Judged("lost", f"launcher pid {rec.pid} ended without a final state (a full disk?)", fix)
    here = rec.host == hostname()
    if here and not pid_alive(rec.pid):
        if rec.trainer_stopping():
            return Judged("stopping", f"launcher pid {rec.pid} is gone; its trainer finishes a final checkpoint",
                          "wait, then " + fix)
        return Judged("stale", f"launcher pid {rec.pid} is gone", fix)
    if now > rec.expires_at:
        return Judged("stale", f"holder pid {rec.pid} on {rec.host}: no heartbeat for "
                               f"{now - rec.expires_at + rec.ttl_s:.0f} s", fix)
    return _trainer_heartbeat(run_dir, rec, now, fix) or Judged(state)


TRAINER_BEATS = 3  # heartbeats a trainer may miss (the guard writes one every guard.HEARTBEAT_S = 5 s)


def _trainer_heartbeat(run_dir: Path, rec: Any, now: float, fix: str) -> Judged | None:
    """A live launcher over a frozen trainer: the guard's heartbeat of this lease epoch is older than the
    lease TTL (and three beats). None when it is fresh, or there is none to judge by (an older guard, a
    trainer not started yet, a launcher that runs no guard here)."""
    from trainstack.run.rundir import read_json

    beat = read_json(run_dir / layout.TRAINER_HEARTBEAT)
    if not isinstance(beat, dict) or beat.get("epoch") != rec.epoch or not isinstance(beat.get("time"), (int, float)):
        return None
    age = now - float(beat["time"])
    if age <= max(rec.ttl_s, TRAINER_BEATS * 5.0):
        return None
    pid = beat.get("pid")
    return Judged("stale", f"trainer pid {pid}: no heartbeat for {age:.0f} s (stopped or frozen) while its launcher "
                  f"pid {rec.pid} holds the lease", f"kill -CONT {pid} if it was stopped; else stop the run "
                  f"(kill -TERM {rec.pid}) and {fix}")
