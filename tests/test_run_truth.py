"""What a run did, end to end on the tiny trainer: a no-op relaunch of a finished run with a smaller
num_rollout does not change what status and compare report, and a resumed run logs each rollout once
(the trainer drops the steps it redoes; the readers keep the last write of a step anyway)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_py
from trainstack.storage.checkpoints import CheckpointState
from trainstack.run.resume import FINISHED, ResumePlan

FAST = ["args.save_interval=2", "args.eval_interval=null"]


def trainstack(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"})


def rollout_steps(run_dir: Path) -> list[int]:
    steps = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["step_key"] == "rollout/step":
            steps.append(rec["step"])
    return steps


def test_the_continue_hint_never_points_below_the_checkpoint():
    plan = ResumePlan(FINISHED, CheckpointState("/x", 299, 299), 300, num_rollout=40)
    assert plan.suggested_num_rollout() == 600
    assert ResumePlan(FINISHED, CheckpointState("/x", 9, 9), 10, num_rollout=10).suggested_num_rollout() == 20
    assert ResumePlan(FINISHED, CheckpointState("/x", None, None), 0, num_rollout=5).suggested_num_rollout() == 10


def test_resumed_trainer_drops_the_steps_it_redoes(tmp_path, monkeypatch):
    from trainstack.tiny.metrics import drop_redone_steps, first_steps

    path = tmp_path / "metrics.jsonl"
    lines = [{"step_key": "rollout/step", "step": s, "metrics": {"rollout/raw_reward": s}} for s in range(6)]
    lines += [{"step_key": "train/step", "step": s, "metrics": {"train/loss": s}} for s in range(12)]
    lines += [{"step_key": "eval/step", "step": s, "metrics": {"eval/x": s}} for s in (0, 3, 5)]
    path.write_text("".join(json.dumps(rec) + "\n" for rec in lines) + '{"step_key": "rollout/st')  # cut by a kill
    drop_redone_steps(str(path), first_steps(4, 2))  # resuming at rollout 4, two train steps per rollout
    kept = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [r["step"] for r in kept if r["step_key"] == "rollout/step"] == [0, 1, 2, 3]
    assert [r["step"] for r in kept if r["step_key"] == "train/step"] == list(range(8))
    assert [r["step"] for r in kept if r["step_key"] == "eval/step"] == [0, 3]


@pytest.mark.slow
def test_a_finished_run_relaunched_smaller_still_reports_what_it_trained(tmp_path):
    first = run_py("env.num_rollout=6", *FAST, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = next((tmp_path / "runs").iterdir())
    again = run_py("env.num_rollout=2", *FAST, cwd=tmp_path, timeout=300)  # same run id: num_rollout is its length
    assert again.returncode == 0 and "is finished" in again.stderr, again.stderr[-2000:]
    status = trainstack("status", run_dir.name, "--json", cwd=tmp_path)
    row = json.loads(status.stdout)[0]
    assert (row["last_checkpoint"], row["rollouts"], row["target"]) == (5, 6, 6), row
    table = trainstack("status", cwd=tmp_path).stdout
    assert "/2" not in table and re.search(r"│\s+6\s+│", table), table
    compare = json.loads(trainstack("compare", run_dir.name, "--json", cwd=tmp_path).stdout)
    assert compare["rows"][0]["rollouts"] == 6


@pytest.mark.slow
def test_the_finished_hint_suggests_more_than_the_checkpoint(tmp_path):
    assert run_py("env.num_rollout=6", *FAST, cwd=tmp_path, timeout=300).returncode == 0
    again = run_py("env.num_rollout=2", *FAST, cwd=tmp_path, timeout=300)
    suggested = int(re.search(r"env\.num_rollout=(\d+)", again.stderr).group(1))
    assert suggested > 6, again.stderr


@pytest.mark.slow
def test_a_resumed_run_logs_each_rollout_once(tmp_path):
    assert run_py("env.num_rollout=6", *FAST, cwd=tmp_path, timeout=300).returncode == 0
    run_dir = next((tmp_path / "runs").iterdir())
    ckpts = run_dir / "checkpoints"
    # a crash after rollouts 4 and 5 were logged, before iter 5 was committed
    shutil.rmtree(ckpts / "iter_0000005")
    (ckpts / "latest_checkpointed_iteration.txt").write_text("3")
    assert rollout_steps(run_dir) == list(range(6))
    res = run_py("env.num_rollout=6", *FAST, cwd=tmp_path, timeout=300)
    assert res.returncode == 0 and "resuming from rollout 3" in res.stderr, res.stderr[-2000:]
    assert rollout_steps(run_dir) == list(range(6))  # 4 and 5 redone, logged once
    row = json.loads(trainstack("status", run_dir.name, "--json", cwd=tmp_path).stdout)[0]
    assert (row["rollouts"], row["last_checkpoint"]) == (6, 5)
    summary = res.stderr[res.stderr.index("run      "):]
    assert "over 6 rollouts" in summary, summary
