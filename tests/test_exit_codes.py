"""The launcher's exit code, as the CLI reports it: 0 done, 2 bad input, 3 busy, 128+N when a signal N
stopped the run, otherwise the trainer's own code (never a negative status wrapped to 247)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

LONG = ["env.num_rollout=400", "args.save_interval=1", "args.eval_interval=null"]


def launch(tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), *LONG], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            start_new_session=True)


def trainer_pid(launcher: subprocess.Popen, run_dir: Path, timeout: float = 120) -> int:
    """The trainer: the launcher's child, once it has trained a rollout (metrics.jsonl has a line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.stderr.read() if launcher.stderr else ""
        try:
            children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        except OSError:
            children = []
        metrics = run_dir / "metrics.jsonl"
        if children and metrics.is_file() and '"rollout/step"' in metrics.read_text():
            return int(children[0])
        time.sleep(0.2)
    raise AssertionError("the trainer did not start")


def run_dir_of(tmp_path: Path) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/status.json")) if (tmp_path / "runs").is_dir() else []
        if runs:
            return runs[0].parent
        time.sleep(0.2)
    raise AssertionError("no run dir")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_sigterm_to_the_launcher_exits_128_plus_15(tmp_path):
    proc = launch(tmp_path)
    try:
        run_dir = run_dir_of(tmp_path)
        trainer_pid(proc, run_dir)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        stop(proc)
    assert code == 128 + signal.SIGTERM
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "interrupted"


@pytest.mark.slow
def test_a_trainer_killed_by_a_signal_is_128_plus_n_not_247(tmp_path):
    proc = launch(tmp_path)
    try:
        run_dir = run_dir_of(tmp_path)
        os.kill(trainer_pid(proc, run_dir), signal.SIGKILL)
        code = proc.wait(timeout=120)
    finally:
        stop(proc)
    assert code != 247
    assert code == 128 + signal.SIGKILL
