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


# -------------------------------------------------------------------------------------------------
# failures outside the config: their own exit codes (trainstack/errors.py RuntimeFailure), never 2
# -------------------------------------------------------------------------------------------------
def test_cancel_on_a_host_without_scancel_is_a_scheduler_failure_not_bad_input(tmp_path):
    from trainstack.errors import SchedulerFailure

    d = tmp_path / "runs" / "r1"
    d.mkdir(parents=True)
    (d / "status.json").write_text(json.dumps({"run_id": "r1", "state": "running", "launcher": "slurm"}))
    (d / "slurm.json").write_text(json.dumps({"run_id": "r1", "job_id": "77", "job_name": "r1"}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent)}  # no SLURM here
    r = subprocess.run([sys.executable, "-m", "trainstack", "cancel", "r1"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == SchedulerFailure.exit_code == 6, r.stderr
    assert "the scheduler failed: scancel not found" in r.stderr and "Traceback" not in r.stderr


def test_a_commander_refusal_is_a_commander_failure_not_bad_input(tmp_path):
    """The config is fine; the commander says no: exit 8 with its reason, not 2 ("problem in the run config")."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from trainstack.errors import CommanderFailure

    class Refusing(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._answer(200, {"ok": True})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(409, {"detail": "sweep spend limit reached"})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = subprocess.run([sys.executable, str(ROOT / "run.py"), "cluster=lium_cpu", "env.num_rollout=2",
                            "cluster.lium.pod.image=me/trainstack-slime:1", f"cluster.lium.commander_url=http://127.0.0.1:{server.server_address[1]}"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT),
                                              "TRAINSTACK_COMMANDER_TOKEN": "t" * 24},
                           capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert r.returncode == CommanderFailure.exit_code == 8, r.stderr
    assert "the Lium commander failed" in r.stderr and "sweep spend limit reached" in r.stderr
    assert "problem in the run config" not in r.stderr and "Traceback" not in r.stderr


def test_exit_codes_are_documented():
    from trainstack.errors import EXIT_CODES

    table = (ROOT / "docs" / "resume.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in table, code
