"""Runs keyed by run_id, on real processes: run directory, resume policy, one writer per run,
kill-anywhere resume, W&B and TensorBoard identity across restarts."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SMALL_BATCH, run_py

pytestmark = pytest.mark.slow


def launch(tmp: Path, *overrides: str, **kw):
    return run_py(f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data", *overrides, cwd=tmp, **kw)


def run_dir(tmp: Path, run_id: str) -> Path:
    return tmp / "runs" / run_id


def events(rd: Path) -> list[dict]:
    return [json.loads(ln) for ln in (rd / "events.jsonl").read_text().splitlines() if ln.strip()]


def tracker(rd: Path) -> int | None:
    p = rd / "checkpoints" / "latest_checkpointed_iteration.txt"
    return int(p.read_text()) if p.exists() else None


def test_run_directory_and_summary(tmp_path):
    res = launch(tmp_path, "run_id=r1", "env.num_rollout=4", "args.save_interval=2")
    assert res.returncode == 0, res.stderr
    rd = run_dir(tmp_path, "r1")
    for name in ("config.yaml", "overrides.yaml", "args.json", "provenance.json", "choices.json", "command.json",
                 "command.sh", "events.jsonl", "status.json", "metrics.jsonl", "logs/trainer.log"):
        assert (rd / name).exists(), name
    assert os.access(rd / "command.sh", os.X_OK)
    cmd = json.loads((rd / "command.json").read_text())
    assert cmd["argv"][cmd["argv"].index("--save") + 1] == str(rd / "checkpoints")
    assert cmd["argv"][cmd["argv"].index("--load") + 1] == str(rd / "checkpoints")
    assert cmd["env"]["TENSORBOARD_DIR"] == str(rd / "tensorboard")
    assert list((rd / "tensorboard").rglob("events.out.tfevents.*"))
    assert [e["event"] for e in events(rd)] == ["launch", "exit"]
    status = json.loads((rd / "status.json").read_text())
    assert status["state"] == "finished" and status["last_checkpoint"] == 3
    assert "rollout/raw_reward" in status["last_metrics"]
    # cwd is outside the checkout, so the rerun hint names the installed command, not `python run.py`
    for needle in ("run dir", "reward", "more     trainstack run ", "compare  trainstack compare r1",
                   "diff     trainstack diff r1"):
        assert needle in res.stderr, needle
    assert "resume " not in res.stderr  # a finished run has nothing to resume (`more` continues it)
    assert "saved iter_0000003  [100%  reward " in res.stdout and " rollouts/s  done]" in res.stdout  # progress


def test_finished_run_is_reported_and_continuing_resumes(tmp_path):
    args = ("env.num_rollout=3", "args.save_interval=1")
    first = launch(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    rd = next((tmp_path / "runs").iterdir())
    ckpt_mtime = (rd / "checkpoints" / "latest_checkpointed_iteration.txt").stat().st_mtime
    again = launch(tmp_path, *args)
    assert again.returncode == 0 and "is finished" in again.stderr
    assert events(rd)[-1]["event"] == "finished"
    assert (rd / "checkpoints" / "latest_checkpointed_iteration.txt").stat().st_mtime == ckpt_mtime
    assert "[tiny] rollout" not in again.stdout  # nothing trained
    # "continue for N more rollouts": same derived run_id, resumes where it stopped
    more = launch(tmp_path, "env.num_rollout=5", "args.save_interval=1")
    assert more.returncode == 0, more.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [rd.name]
    resume = [e for e in events(rd) if e["event"] == "resume"]
    assert resume and resume[-1]["from_rollout"] == 3
    assert tracker(rd) == 4


def test_changed_training_config_is_refused_with_a_diff_unless_allowed(tmp_path):
    assert launch(tmp_path, "run_id=fixed", "env.num_rollout=2", "args.save_interval=1").returncode == 0
    refused = launch(tmp_path, "run_id=fixed", "env.num_rollout=3", "algo.eps_clip=0.3", "args.save_interval=1")
    assert refused.returncode == 2
    assert "eps_clip" in refused.stderr and "0.2 -> 0.3" in refused.stderr
    assert "resume.allow_changes=[eps_clip]" in refused.stderr and "Traceback" not in refused.stderr
    assert tracker(run_dir(tmp_path, "fixed")) == 1
    allowed = launch(tmp_path, "run_id=fixed", "env.num_rollout=3", "algo.eps_clip=0.3", "args.save_interval=1",
                     "resume.allow_changes=[eps_clip]")
    assert allowed.returncode == 0, allowed.stderr
    ev = [e for e in events(run_dir(tmp_path, "fixed")) if e["event"] == "resume"][-1]
    assert ev["allowed_changes"] == {"eps_clip": [0.2, 0.3]}


def test_resume_policies(tmp_path):
    assert launch(tmp_path, "run_id=p", "env.num_rollout=2", "args.save_interval=1").returncode == 0
    never = launch(tmp_path, "run_id=p", "env.num_rollout=4", "args.save_interval=1", "resume=never")
    assert never.returncode == 2 and "resume=never" in never.stderr
    must = launch(tmp_path, "run_id=other", "env.num_rollout=2", "resume=must")
    assert must.returncode == 2 and "no complete checkpoint" in must.stderr
    assert not (run_dir(tmp_path, "other") / "checkpoints").exists()


def test_two_concurrent_launches_exactly_one_trains(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp_path}/runs",
            f"paths.data_root={tmp_path}/data", "run_id=busy", "env.num_rollout=400"]
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        status = run_dir(tmp_path, "busy") / "status.json"
        deadline = time.time() + 60
        while not (status.exists() and json.loads(status.read_text()).get("state") == "running"):
            assert time.time() < deadline and first.poll() is None
            time.sleep(0.1)
        t0 = time.time()
        second = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert time.time() - t0 < 15
        assert second.returncode == 3
        assert "already running" in second.stderr and f"pid {first.pid}" in second.stderr
        assert [e["event"] for e in events(run_dir(tmp_path, "busy"))].count("launch") == 1
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.wait(timeout=60)


def _trainer_pid(launcher_pid: int) -> int | None:
    try:
        kids = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def _weights(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def _final_rewards(rd: Path) -> dict[int, float]:
    out = {}
    for ln in (rd / "metrics.jsonl").read_text().splitlines():
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        if rec.get("step_key") == "rollout/step":
            out[rec["step"]] = rec["metrics"]["rollout/raw_reward"]
    return out


def test_sigkill_at_random_points_always_resumes_from_latest_complete_checkpoint(tmp_path):
    n = 100  # long enough that 12 kills land before the run can finish (the soak, benchmarks/soak.py, does 50)
    common = [f"env.num_rollout={n}", "args.save_interval=1", "env.eval_interval=null", "env.eval_prompt_data=null",
              *SMALL_BATCH]
    assert launch(tmp_path, "run_id=reference", *common).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINSTACK_TINY_SLOW_SAVE": "0.03"}
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp_path}/runs",
            f"paths.data_root={tmp_path}/data", "run_id=victim", *common]
    rd = run_dir(tmp_path, "victim")
    rng = random.Random(1234)
    kills = 0
    for attempt in range(60):
        if kills >= 12:
            break
        assert tracker(rd) != n - 1, "the run finished before 12 kills: raise n"
        before = tracker(rd)
        started_before = len([e for e in events(rd) if e["event"] in ("launch", "resume")]) if rd.exists() else 0
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(0.8, 2.8))  # from before the trainer starts to mid-training / mid-save
        if proc.poll() is None:
            target = _trainer_pid(proc.pid) if attempt % 2 else None
            if target:
                os.killpg(target, signal.SIGKILL)  # the trainer alone: the launcher records the exit
            else:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher: its guard stops the trainer, a relaunch waits
            kills += 1
        proc.wait(timeout=60)
        ev = events(rd)
        starts = [e for e in ev if e["event"] in ("launch", "resume")]
        if before is not None and len(starts) > started_before:  # this launch started a trainer: never from
            # zero once a checkpoint exists, never from a partial one; at or after the checkpoint seen before
            # it (a killed launcher's trainer saves a final one while the relaunch waits)
            assert starts[-1]["event"] == "resume" and starts[-1]["checkpoint"] >= before
            assert starts[-1]["from_rollout"] == starts[-1]["checkpoint"] + 1
    assert kills >= 12
    final = launch(tmp_path, "run_id=victim", *common)
    assert final.returncode == 0, final.stderr
    assert tracker(rd) == n - 1
    ref = _weights(run_dir(tmp_path, "reference") / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    got = _weights(rd / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    ref_sd, got_sd = ref.get("model", ref), got.get("model", got)
    assert ref_sd.keys() == got_sd.keys()
    import torch

    assert all(torch.equal(ref_sd[k], got_sd[k]) for k in ref_sd), "final weights differ from the uninterrupted run"
    assert _final_rewards(rd) == _final_rewards(run_dir(tmp_path, "reference"))


def test_one_wandb_run_and_one_tensorboard_curve_across_three_restarts(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainstack.metrics import wandb_offline

    env = {"WANDB_API_KEY": ""}
    for n in (2, 4, 6):  # a first run and two continuations = three restarts of one run_id
        res = launch(tmp_path, "run_id=tracked", f"env.num_rollout={n}", "args.use_wandb=true",
                     "args.save_interval=1", env=env)
        assert res.returncode == 0, res.stderr
    rd = run_dir(tmp_path, "tracked")
    wandb_files = sorted((rd / "wandb").rglob("run-*.wandb"))
    assert len(wandb_files) == 3
    runs = [wandb_offline.read_run(f) for f in wandb_files]
    assert {r["run_id"] for r in runs} == {"tracked"}  # WANDB_RUN_ID derived from run_id, every restart
    steps = []
    for r in runs:
        steps += [h["rollout/step"] for h in r["history"] if "rollout/raw_reward" in h and "rollout/step" in h]
    assert sorted(steps) == list(range(6))
    acc = EventAccumulator(str(rd / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tb_steps = [e.step for e in acc.Scalars("rollout/raw_reward")]
    assert sorted(set(tb_steps)) == list(range(6))
