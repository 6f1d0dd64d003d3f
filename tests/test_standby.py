"""The guard started in standby (trainstack/launch/standby.py) against real processes: taken, it is the guard
a fresh start would have been (its arguments, environment, working directory, exit code, stdin); gone, idle or
let go, it leaves nothing behind and the launch starts a fresh guard."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import run_py
from trainstack.launch import standby
from trainstack.launch.process import TrainerProcess, guarded

PY = sys.executable
# the trainer: where it runs, what it was given, and who its guard is
TRAINER = ("import os, sys; print('cwd', os.getcwd()); print('env', os.environ.get('TS_GIVEN'), os.environ.get('TS_LEFT'));"
           "print('stdin', repr(sys.stdin.read())); print('guard', open(f'/proc/{os.getppid()}/cmdline', 'rb').read());"
           "sys.exit(3)")


@pytest.fixture(autouse=True)
def _none_left():
    yield
    standby.release()


def _run(tmp_path: Path) -> tuple[int, str]:
    env = {"PATH": os.environ["PATH"], "TS_GIVEN": "yes"}
    proc = TrainerProcess(guarded([PY, "-c", TRAINER], 5.0, tmp_path / "trainer.log"), env, str(tmp_path), 5.0)
    code = proc.wait()
    return code, (tmp_path / "trainer.log").read_text()


def _gone(proc: subprocess.Popen, within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def test_a_taken_standby_is_the_guard_a_fresh_start_would_be(tmp_path, monkeypatch):
    monkeypatch.setenv("TS_LEFT", "launcher-only")  # in the standby's own start environment, not the run's
    standby.start(["env.num_rollout=1"])
    assert len(standby._WAITING) == 1
    waiting = standby._WAITING[0]
    time.sleep(0.3)  # it is up and waiting: the start comes later, as in a launch
    code, log = _run(tmp_path)
    assert code == 3
    assert f"cwd {tmp_path}" in log and "env yes None" in log and "stdin ''" in log
    assert "--standby" in log  # this guard was the standby
    assert waiting.poll() == 3 and not standby._WAITING


@pytest.mark.parametrize("how", ["killed", "idle", "released"])
def test_a_standby_gone_leaves_nothing_and_a_fresh_guard_starts(how, tmp_path, monkeypatch):
    if how == "idle":
        monkeypatch.setenv("TRAINSTACK_GUARD_STANDBY_IDLE_S", "0.2")
    standby.start([])
    waiting = standby._WAITING[0]
    if how == "killed":
        waiting.kill()
    if how == "released":
        standby.release()
    assert _gone(waiting)
    assert waiting.returncode == (-9 if how == "killed" else 0)
    code, log = _run(tmp_path)
    assert code == 3 and "--standby" not in log and "env yes None" in log  # a fresh guard did it


def _marked(mark: str) -> list[int]:
    """The live processes whose environment holds `mark`."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if mark.encode() in Path(entry.path, "environ").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def test_run_py_lets_an_unused_standby_go(tmp_path):
    """A launch refused after the standby started (a bad value: exit 2): nothing of it outlives run.py."""
    mark = f"TS_STANDBY_MARK=probe-{os.getpid()}-{time.monotonic_ns()}"
    res = run_py("algo.lr=fast", cwd=tmp_path, env={**os.environ, mark.split("=")[0]: mark.split("=")[1]})
    assert res.returncode == 2, res.stderr
    end = time.monotonic() + 5
    while _marked(mark) and time.monotonic() < end:
        time.sleep(0.05)
    assert _marked(mark) == []


@given(st.lists(st.sampled_from(["a=1", "run_id=x", "dry_run=false", "dry_run=False", "+dry_run=0", "dry_run=true",
                                 "dry_run=short", "++dry_run='true'", "-m", "--cfg", "--help", "model=qwen3-4B"]),
                max_size=5))
def test_only_a_command_line_that_can_launch_starts_one(argv):
    flags = any(a.startswith("-") for a in argv)
    dry = any(a.split("=", 1)[1].strip("'").lower() in ("true", "short") for a in argv if "dry_run=" in a)
    assert standby.wanted(argv) == (not flags and not dry)


def test_switched_off(monkeypatch):
    monkeypatch.setenv(standby.ENV, "0")
    standby.start([])
    assert not standby._WAITING
