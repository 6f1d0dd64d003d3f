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
    res = launch(tmp_path, f"cluster.ray_job.address={ray_head}", "run_id=rj", "env.num_rollout=3", "args.save_interval=1")
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
            f"paths.data_root={tmp_path}/data", "cluster.launcher=ray_job", f"cluster.ray_job.address={ray_head}",
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
    res = launch(tmp_path, f"cluster.ray_job.address=http://127.0.0.1:{free_port()}", "env.num_rollout=2")
    assert res.returncode == 2 and "no Ray cluster answers" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()


def test_starts_and_stops_only_its_own_head(tmp_path, ray_head):
    port = free_port()
    res = launch(tmp_path, f"cluster.ray_job.address=http://127.0.0.1:{port}", "cluster.ray_job.start_head=true",
                 "run_id=own", "env.num_rollout=2", "args.save_interval=1")
    assert res.returncode == 0, res.stderr
    assert not ray_job.ray_answers(f"http://127.0.0.1:{port}")  # the head it started is gone
    assert ray_job.ray_answers(ray_head)  # the one it did not start is untouched


def test_sigkilled_launcher_never_leaves_two_jobs_writing_one_run(tmp_path, ray_head):
    """SIGKILL the launcher, relaunch: the old job is fenced and retired before the new epoch's job is
    submitted; at no moment do two jobs of the run run; secrets never reach Ray's logs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_API_KEY": "sekret-ray-123"}
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp_path}/runs",
            f"paths.data_root={tmp_path}/data", "cluster.launcher=ray_job", f"cluster.ray_job.address={ray_head}",
            "run_id=rk", "env.num_rollout=60", "args.save_interval=1", "resume.grace_s=2", "resume.lease_ttl_s=12"]
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    tracker = tmp_path / "runs" / "rk" / "checkpoints" / "latest_checkpointed_iteration.txt"
    deadline = time.time() + 120
    while not tracker.exists():
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.2)
    # the job's guard read the secrets file (created 0600) and removed it: a SIGKILLed launcher leaves none
    assert not (tmp_path / "runs" / "rk" / ".secrets.json").exists()
    os.killpg(first.pid, signal.SIGKILL)  # the launcher only: its Ray job keeps running
    first.wait()
    second = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    overlap = 0
    while second.poll() is None:
        live = [j for j in jobs_of(ray_head, "rk") if str(j.status.value) in ("PENDING", "RUNNING")]
        overlap = max(overlap, len(live))
        assert time.time() < deadline + 300
        time.sleep(0.3)
    assert second.returncode == 0, second.stderr.read()[-3000:]
    assert overlap <= 1
    ids = sorted(j.submission_id for j in jobs_of(ray_head, "rk"))
    assert ids == ["trainstack-rk-e1", "trainstack-rk-e2"], ids
    ck = tmp_path / "runs" / "rk" / "checkpoints"
    pubs = [json.loads(x) for x in (ck / "publish.jsonl").read_text().splitlines()]
    first_of_2 = next(i for i, p in enumerate(pubs) if p["epoch"] == 2)
    assert all(p["epoch"] == 2 for p in pubs[first_of_2:])
    assert not (tmp_path / "runs" / "rk" / ".secrets.json").exists()
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head)
    for sid in ids:
        info = client.get_job_info(sid)
        assert "sekret-ray-123" not in json.dumps(info.runtime_env or {}) + (info.entrypoint or "")
        assert "sekret-ray-123" not in client.get_job_logs(sid)
    for path in Path("/tmp").glob("tsray-*/**/*"):  # Ray's own session dirs (logs, runtime env)
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert b"sekret-ray-123" not in path.read_bytes(), path


def test_a_head_trainstack_started_dies_with_its_sigkilled_launcher(tmp_path):
    """The launcher that started a Ray head is SIGKILLed: the guard that owns the head stops its whole
    group and removes its /tmp/tsray-* dir (before: 6 Ray processes kept running, and were reused)."""
    from trainstack.procgroup import group_members

    port = free_port()
    script = (f"import sys; from pathlib import Path; from trainstack.launch.ray_job import LocalRayHead\n"
              f"h = LocalRayHead({port}, num_cpus=1, num_gpus=0, log_path=Path({str(tmp_path / 'head.log')!r}))\n"
              f"h.wait_ready(); print(h.proc.pid, h.temp_dir, flush=True)\n"
              f"import time; time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    try:
        assert launcher.stdout is not None
        pgid, temp = launcher.stdout.readline().split()
        assert ray_job.ray_answers(f"http://127.0.0.1:{port}") and Path(temp).is_dir()
        assert len(group_members(int(pgid))) >= 3  # guard, ray start, gcs, raylet, ...
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 60
        while group_members(int(pgid)) or Path(temp).exists():
            assert time.monotonic() < deadline, f"left: {group_members(int(pgid))}, {temp} exists: {Path(temp).exists()}"
            time.sleep(0.5)
        assert not ray_job.ray_answers(f"http://127.0.0.1:{port}")
    finally:
        launcher.kill()


def test_wait_false_starts_each_run_in_the_background_and_returns(tmp_path, ray_head):
    """hydra.launcher.wait=false: the sweep returns once both runs are started (`trainstack exec` detached, each
    following its Ray job); each point's result is `submitted`; the runs finish without the launcher."""
    t0 = time.monotonic()
    res = run_py("-m", "hydra/launcher=ray_job", "hydra.launcher.wait=false", f"hydra.launcher.address={ray_head}",
                 f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "env.num_rollout=3",
                 "algo.lr=1e-3,2e-3", f"hydra.sweep.dir={tmp_path}/sw", cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "started" in res.stderr and "in the background" in res.stderr and "sweep summary" not in res.stderr
    runs = json.loads((tmp_path / "sw" / "sweep.json").read_text())["runs"]
    assert len(runs) == 2 and time.monotonic() - t0 < 60
    deadline = time.monotonic() + 180
    states: list = []
    while time.monotonic() < deadline:
        states = [json.loads((Path(r["run_dir"]) / "status.json").read_text()).get("state") for r in runs]
        if states == ["finished", "finished"]:
            break
        time.sleep(1)
    assert states == ["finished", "finished"], [(Path(r["run_dir"]) / "logs" / "exec.log").read_text()[-2000:]
                                                for r in runs]
    for r in runs:
        assert len(jobs_of(ray_head, r["run_id"])) == 1
