"""Truthful status: "running" is judged by the lease and its holder's liveness
(trainstack/run/rundir/liveness.py), and every exit path, a full disk included, leaves a final state
or a lease that says the run is not running; a fenced launcher exits 75."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from trainstack.fencing.fence import EXIT_FENCED
from trainstack.fencing.lease import Lease
from trainstack.procgroup import group_members
from trainstack.run.rundir import RunDir
from trainstack.run.rundir.liveness import judge

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _running(tmp: Path) -> RunDir:
    rd = RunDir(tmp)
    rd.update_status(state="running")
    return rd


def _state(run_dir: Path) -> str:
    from trainstack.reports.status import collect, fill

    return str(fill(collect([str(run_dir)]))[0].state)


def test_a_live_holder_is_running(tmp_path):
    _running(tmp_path)
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    assert judge(tmp_path, RunDir(tmp_path).status()).state == "running"
    assert _state(tmp_path) == "running"
    lease.release()


def test_a_dead_launcher_is_stale_with_the_fix(tmp_path):
    _running(tmp_path)
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    lease.renew(pid=_dead_pid())  # SIGKILL of the launcher: its lease names a dead pid
    j = judge(tmp_path, RunDir(tmp_path).status())
    assert j.state == "stale" and "is gone" in j.why and "trainstack exec" in j.fix
    assert _state(tmp_path).startswith("stale (")


def test_an_expired_lease_of_another_host_is_stale(tmp_path):
    _running(tmp_path)
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    lease.renew(host="elsewhere")
    assert judge(tmp_path, RunDir(tmp_path).status()).state == "running"  # another host: its heartbeat decides
    j = judge(tmp_path, RunDir(tmp_path).status(), now=time.time() + 1200)
    assert j.state == "stale" and "no heartbeat" in j.why


def test_a_released_or_deleted_lease_is_lost(tmp_path):
    _running(tmp_path)
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    lease.release()  # a launcher that could not record its final state (disk full), then released
    assert judge(tmp_path, RunDir(tmp_path).status()).state == "lost"
    (tmp_path / "lease.json").unlink()  # lease.epochs remains: a lifecycle ran here
    j = judge(tmp_path, RunDir(tmp_path).status())
    assert j.state == "lost" and "gone" in j.why


@pytest.mark.parametrize("final", ["finished", "failed", "interrupted", "fenced", None])
def test_final_states_and_run_dirs_without_a_lease_are_taken_as_written(tmp_path, final):
    RunDir(tmp_path).update_status(state=final)
    assert judge(tmp_path, RunDir(tmp_path).status()).state == final
    _running(tmp_path)  # a launcher that runs no lifecycle here (the commander's pods): its own status decides
    assert judge(tmp_path, RunDir(tmp_path).status()).state == "running"


# --- every exit path leaves a final state --------------------------------------------------------


class _Done:
    signalled = None
    pgid = None

    def __init__(self, code: int = 0):
        self.code = code

    def stop(self, signum: int = signal.SIGTERM) -> None:
        pass

    def wait(self) -> int:
        return self.code


def _spec(tmp: Path, *overrides: str):
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.spec import RunSpec

    run, cmd = build_from_overrides([f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data", "run_id=full",
                                     *overrides])
    return RunSpec.from_run(run, cmd)


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device", "status.json")


def test_disk_full_at_the_end_still_leaves_a_truthful_state(tmp_path, monkeypatch, capsys):
    """The trainer ended, the disk is full: recording the final state and releasing the lease both
    fail. No traceback; the lease is unlinked (no space needed), so status says lost, not running."""
    from trainstack.run import lifecycle
    from trainstack.fencing.lease import Lease as L

    spec = _spec(tmp_path)

    def start(env, rundir):
        monkeypatch.setattr(RunDir, "update_status", _enospc)  # from here on the disk is full
        monkeypatch.setattr(RunDir, "event", _enospc)
        monkeypatch.setattr(L, "release", _enospc)
        return _Done(1)

    assert lifecycle.execute(spec, start) == 1
    assert "could not be recorded" in capsys.readouterr().err
    monkeypatch.undo()
    rd = Path(spec.run_dir)
    assert json.loads((rd / "status.json").read_text())["state"] == "running"  # what the disk holds...
    assert not (rd / "lease.json").exists()
    assert judge(rd, RunDir(rd).status()).state == "lost"  # ...and what status says


def test_disk_full_before_the_trainer_is_one_message_and_a_final_state(tmp_path, monkeypatch):
    from trainstack.run import lifecycle
    from trainstack.errors import RuntimeFailure

    spec = _spec(tmp_path)
    real = RunDir.write_spec
    monkeypatch.setattr(RunDir, "write_spec", lambda self, s: (real(self, s), _enospc())[1])
    with pytest.raises(RuntimeFailure) as exc:  # the CLI prints it as one screen, exit 5: no traceback
        lifecycle.execute(spec, lambda env, rd: _Done(0))
    assert "No space left" in exc.value.render() and "free space" in exc.value.render()
    rd = Path(spec.run_dir)
    assert RunDir(rd).status()["state"] == "failed"  # the small writes still fit: recorded
    assert judge(rd, RunDir(rd).status()).state == "failed"
    assert json.loads((rd / "lease.json").read_text())["expires_at"] == 0  # released


def test_a_lost_lease_exits_75(tmp_path):
    """A launcher whose lease was taken exits EXIT_FENCED, not 143/137 (the trainer it stopped)."""
    from trainstack.run import lifecycle

    spec = _spec(tmp_path, "resume.lease_ttl_s=6", "resume.grace_s=0")

    class Superseded(_Done):
        def stop(self, signum: int = signal.SIGTERM) -> None:
            self.signalled = signum

        def wait(self) -> int:
            os.unlink(Path(spec.run_dir) / "lease.json")  # lease.json deleted: a relaunch took the run
            Lease.acquire(Path(spec.run_dir) / "lease.json", ttl_s=600)
            deadline = time.monotonic() + 30
            while self.signalled is None:  # a heartbeat notices and stops the trainer
                assert time.monotonic() < deadline
                time.sleep(0.05)
            return -signal.SIGTERM

    assert lifecycle.execute(spec, lambda env, rd: Superseded()) == EXIT_FENCED


@pytest.mark.slow
def test_status_after_the_launcher_is_sigkilled_is_not_running(tmp_path):
    """SIGKILL of the launcher alone: status.json still says running, `trainstack status` does not."""
    base = ["env.rollout_batch_size=4", "env.n_samples_per_prompt=4", "env.global_batch_size=16",
            "env.eval_interval=null", "env.num_rollout=400", "args.save_interval=1", "resume.grace_s=1",
            "run_id=killed"]
    rd = tmp_path / "runs" / "killed"
    p = subprocess.Popen([PY, str(ROOT / "run.py"), *base], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (rd / "checkpoints" / "latest_checkpointed_iteration.txt").exists():
        assert time.monotonic() < deadline and p.poll() is None, "no checkpoint"
        time.sleep(0.1)
    pgid = json.loads((rd / "lease.json").read_text())["trainer_pgid"]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert json.loads((rd / "status.json").read_text())["state"] == "running"  # nobody could write it
    assert _state(rd).split(" ")[0] in ("stale", "stopping")
    deadline = time.monotonic() + 30
    while group_members(pgid):  # the guard stops its trainer (grace 1 s)
        assert time.monotonic() < deadline, "the trainer outlived its launcher"
        time.sleep(0.1)
    assert _state(rd).startswith("stale (launcher pid")
