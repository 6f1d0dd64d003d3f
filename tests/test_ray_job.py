"""The ray_job launcher against a real Ray head on loopback (Jobs API): run, Ctrl-C, start/stop
only the Ray we own."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_py

pytestmark = pytest.mark.slow
ray_job = pytest.importorskip("trainstack.launch.ray_job")
pytest.importorskip("ray.job_submission")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    log = tmp_path_factory.mktemp("ray") / "head.log"
    head = ray_job.LocalRayHead(free_port(), num_cpus=2, num_gpus=0, log_path=log)
    try:
        head.wait_ready()
        yield head.address
    finally:
        head.stop()


def jobs_of(address: str, run_id: str):
    from ray.job_submission import JobSubmissionClient

    return [j for j in JobSubmissionClient(address).list_jobs()
            if (j.metadata or {}).get("trainstack_run_id") == run_id]


def launch(tmp: Path, *overrides: str):
    return run_py(f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data", "cluster.launcher=ray_job",
                  *overrides, cwd=tmp, timeout=300)


def test_tiny_trainer_runs_through_the_jobs_api(tmp_path, ray_head):
    res = launch(tmp_path, f"cluster.ray_address={ray_head}", "run_id=rj", "env.num_rollout=3", "args.save_interval=1")
    assert res.returncode == 0, res.stderr
    rd = tmp_path / "runs" / "rj"
    assert "rollout 3/3" in (rd / "logs" / "trainer.log").read_text()
    assert (rd / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    jobs = jobs_of(ray_head, "rj")
    assert len(jobs) == 1 and str(jobs[0].status.value) == "SUCCEEDED"
    assert json.loads((rd / "status.json").read_text())["state"] == "finished"


def test_ctrl_c_stops_the_job(tmp_path, ray_head):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp_path}/runs",
            f"paths.data_root={tmp_path}/data", "cluster.launcher=ray_job", f"cluster.ray_address={ray_head}",
            "run_id=rc", "env.num_rollout=5000", "args.save_interval=1000"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    metrics = tmp_path / "runs" / "rc" / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.exists() and metrics.read_text().count("rollout/step") >= 2):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the launcher
    proc.wait(timeout=90)
    assert proc.returncode != 0
    job = jobs_of(ray_head, "rc")[0]
    assert str(job.status.value) == "STOPPED"
    ev = [json.loads(ln) for ln in (tmp_path / "runs" / "rc" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in ev][-2:] == ["signal", "exit"]


def test_no_ray_is_a_clear_error_and_nothing_runs(tmp_path):
    res = launch(tmp_path, f"cluster.ray_address=http://127.0.0.1:{free_port()}", "env.num_rollout=2")
    assert res.returncode == 2 and "no Ray cluster answers" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()


def test_starts_and_stops_only_its_own_head(tmp_path, ray_head):
    port = free_port()
    res = launch(tmp_path, f"cluster.ray_address=http://127.0.0.1:{port}", "cluster.start_ray_head=true",
                 "run_id=own", "env.num_rollout=2", "args.save_interval=1")
    assert res.returncode == 0, res.stderr
    assert not ray_job.ray_answers(f"http://127.0.0.1:{port}")  # the head it started is gone
    assert ray_job.ray_answers(ray_head)  # the one it did not start is untouched
