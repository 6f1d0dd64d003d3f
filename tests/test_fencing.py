"""Never two writers, no orphans, no hangs (docs/resume.md): trainstack.run.trainer_guard fences a trainer's
process group against the run's lease, on real processes with real signals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT

from trainstack.fencing.fence import EXIT_FENCED
from trainstack.fencing.lease import Lease
from trainstack.procgroup import group_members, pid_alive

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SMALL = ["env.rollout_batch_size=4", "env.n_samples_per_prompt=4", "env.global_batch_size=16", "env.eval_interval=null"]


def _wait(cond, timeout: float, what: str) -> None:
    """Until cond() is true; a file it reads that is not there yet (or half written) counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except (OSError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _guard(tmp: Path, script: str, lease: Lease | None, grace: float = 2.0, **popen) -> subprocess.Popen:
    (tmp / "trainer.py").write_text(textwrap.dedent(script))
    env = dict(ENV)
    if lease is not None:
        from trainstack.fencing.fence import Fence

        env.update(Fence(str(lease.path), lease.record.token, lease.record.epoch, 0.5).to_env())
    return subprocess.Popen([PY, "-m", "trainstack.run.trainer_guard", "--grace", str(grace), "--log", str(tmp / "t.log"), "--",
                             PY, str(tmp / "trainer.py")], cwd=tmp, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen)


LOOP = """
    import os, signal, subprocess, sys, time
    child = subprocess.Popen(["sleep", "300"])  # a plugin's helper process
    open("child.pid", "w").write(str(child.pid))
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    while not stop:
        time.sleep(0.05)
    open("stopped", "w").write("graceful")
    sys.exit(143)
"""


def test_trainer_leftovers_are_reaped_when_it_exits(tmp_path):
    g = _guard(tmp_path, """
        import subprocess
        child = subprocess.Popen(["sleep", "300"])
        open("child.pid", "w").write(str(child.pid))
        raise SystemExit(7)
    """, lease=None)
    assert g.wait(timeout=30) == 7
    pid = int((tmp_path / "child.pid").read_text())
    _wait(lambda: not pid_alive(pid), 5, "the plugin's child survived the trainer")


def test_superseded_lease_kills_the_group_at_once(tmp_path):
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    g = _guard(tmp_path, LOOP, lease)
    _wait(lambda: (tmp_path / "child.pid").exists(), 20, "trainer never started")
    child = int((tmp_path / "child.pid").read_text())
    lease.release()
    Lease.acquire(tmp_path / "lease.json", ttl_s=600)  # a new holder: epoch 2
    assert g.wait(timeout=10) == EXIT_FENCED
    assert not (tmp_path / "stopped").exists()  # killed, no final save attempt
    _wait(lambda: not pid_alive(child), 5, "group member survived")
    assert "superseded by epoch 2" in (tmp_path / "t.log").read_text()


def test_expiring_lease_stops_the_trainer_before_expiry(tmp_path):
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=8)  # nobody renews it: a frozen launcher
    g = _guard(tmp_path, LOOP, lease, grace=1.0)
    assert g.wait(timeout=20) == 143
    assert (tmp_path / "stopped").read_text() == "graceful"
    assert time.time() < lease.record.expires_at  # stopped before anybody could take over
    # its launcher is frozen and records nothing: the guard records the orphan's end in the run dir
    ends = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["code"], e["lease_epoch"]) for e in ends] == [("trainer_stopped_by_guard", 143, 1)]
    assert "expires in" in ends[0]["reason"]


def test_guard_stops_the_trainer_when_its_launcher_dies(tmp_path):
    (tmp_path / "trainer.py").write_text(textwrap.dedent(LOOP))
    launcher = subprocess.Popen([PY, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([{PY!r}, "-m", "trainstack.run.trainer_guard", "--grace", "2", "--parent", str(__import__("os").getpid()),
                          "--", {PY!r}, "trainer.py"], start_new_session=True)
        time.sleep(300)
    """)], cwd=tmp_path, env=ENV, start_new_session=True)
    _wait(lambda: (tmp_path / "child.pid").exists(), 20, "trainer never started")
    launcher.kill()
    launcher.wait()
    _wait(lambda: (tmp_path / "stopped").exists(), 10, "trainer not stopped gracefully after its launcher died")


def test_console_reader_that_stops_reading_never_stalls_the_trainer(tmp_path):
    """`python run.py ... | head -3`: the reader leaves, the run goes on to the end (logs keep everything)."""
    p = subprocess.Popen([PY, str(ROOT / "run.py"), *SMALL, "env.num_rollout=30", "args.save_interval=10",
                          "run_id=piped"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(3):
        p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=240) == 0
    rd = tmp_path / "runs" / "piped"
    assert json.loads((rd / "status.json").read_text())["state"] == "finished"
    assert "rollout 30/30" in (rd / "logs" / "trainer.log").read_text()


@pytest.mark.slow
def test_sighup_and_killed_trainer_leave_a_truthful_status_and_exit_code(tmp_path):
    base = [*SMALL, "env.num_rollout=400", "args.save_interval=1"]
    rd = tmp_path / "runs" / "hup"
    p = subprocess.Popen([PY, str(ROOT / "run.py"), *base, "run_id=hup"], cwd=tmp_path, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait(lambda: (rd / "checkpoints" / "latest_checkpointed_iteration.txt").exists(), 120, "no checkpoint")
    p.send_signal(signal.SIGHUP)  # the terminal went away
    assert p.wait(timeout=60) == 128 + signal.SIGHUP
    status = json.loads((rd / "status.json").read_text())
    assert status["state"] == "interrupted" and status["last_checkpoint"] is not None
    # the trainer itself SIGKILLed: exit 137 (128+9), never 247, status failed
    p = subprocess.Popen([PY, str(ROOT / "run.py"), *base, "run_id=hup"], cwd=tmp_path, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    lease = rd / "lease.json"
    _wait(lambda: json.loads(lease.read_text()).get("trainer_pgid") and json.loads(lease.read_text())["epoch"] == 2,
          60, "trainer not started")
    pgid = json.loads(lease.read_text())["trainer_pgid"]
    _wait(lambda: len(group_members(pgid)) >= 2, 30, "no trainer under the guard")
    trainer = max(group_members(pgid))  # the guard's child
    os.kill(trainer, signal.SIGKILL)
    assert p.wait(timeout=60) == 137
    assert json.loads((rd / "status.json").read_text())["state"] == "failed"


@pytest.mark.slow
def test_frozen_launcher_is_superseded_and_never_publishes_again(tmp_path):
    """Ctrl-Z / SIGSTOP of the launcher past the lease TTL: its trainer is stopped (final checkpoint)
    before the lease expires, a relaunch takes over, and when the frozen one comes back it publishes
    nothing and exits fenced."""
    base = [*SMALL, "env.num_rollout=400", "args.save_interval=1", "resume.lease_ttl_s=9", "resume.grace_s=1",
            "run_id=frozen"]
    rd = tmp_path / "runs" / "frozen"
    ck = rd / "checkpoints"
    first = subprocess.Popen([PY, str(ROOT / "run.py"), *base], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    _wait(lambda: (ck / "latest_checkpointed_iteration.txt").exists(), 120, "no checkpoint")
    os.kill(first.pid, signal.SIGSTOP)
    expires = json.loads((rd / "lease.json").read_text())["expires_at"]
    pgid = json.loads((rd / "lease.json").read_text())["trainer_pgid"]
    _wait(lambda: not group_members(pgid), 20, "the frozen launcher's trainer kept running")
    assert time.time() < expires + 0.5  # stopped before its lease could be taken over
    time.sleep(max(0.0, expires - time.time()) + 0.5)
    second = subprocess.Popen([PY, str(ROOT / "run.py"), *base], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    publishes = lambda: [json.loads(x) for x in (ck / "publish.jsonl").read_text().splitlines()]  # noqa: E731
    _wait(lambda: any(p["epoch"] == 2 for p in publishes()), 90, "the relaunch never published")
    os.kill(first.pid, signal.SIGCONT)  # the stale holder comes back
    assert first.wait(timeout=60) == EXIT_FENCED  # fenced exits are 75
    n = len(publishes())
    _wait(lambda: len(publishes()) > n + 1, 60, "the new holder stopped publishing")
    second.terminate()
    assert second.wait(timeout=60) == 128 + signal.SIGTERM
    pubs = publishes()
    first_of_2 = next(i for i, p in enumerate(pubs) if p["epoch"] == 2)
    assert all(p["epoch"] == 2 for p in pubs[first_of_2:]), pubs  # epoch 1 never published after epoch 2
    assert [e["event"] for e in (json.loads(x) for x in (rd / "events.jsonl").read_text().splitlines())].count(
        "lease_lost") == 1
