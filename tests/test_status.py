"""`trainstack status` / `cancel` on run directories and sweep manifests (no SLURM needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.status import collect, fill, run_cancel


def make_run(root: Path, run_id: str, overrides: list[str], state: str, ckpt: int | None, reward: float | None,
             in_status: bool = True, job_id: str | None = None) -> Path:
    d = root / "runs" / run_id
    d.mkdir(parents=True)
    status = {"run_id": run_id, "state": state, "last_checkpoint": ckpt, "num_rollout": 10,
              "last_metrics": {"rollout/raw_reward": reward} if in_status and reward is not None else {}}
    (d / "status.json").write_text(json.dumps(status))
    if reward is not None:
        (d / "metrics.jsonl").write_text(json.dumps({"step_key": "rollout/step", "step": 0,
                                                      "metrics": {"rollout/raw_reward": reward}}) + "\n")
    (d / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "events.jsonl").write_text(json.dumps({"event": "launch"}) + "\n"
                                    + json.dumps({"event": "resume", "from_rollout": 4}) + "\n")
    if job_id:
        (d / "slurm.json").write_text(json.dumps({"run_id": run_id, "job_id": job_id, "job_name": run_id,
                                                  "logs": {"stdout": f"/x/{job_id}_0_log.out"}}))
    return d


@pytest.fixture
def sweep(tmp_path):
    a = make_run(tmp_path, "r-a", ["env.num_rollout=10", "algo.lr=0.001"], "finished", 9, 0.5)
    b = make_run(tmp_path, "r-b", ["env.num_rollout=10", "algo.lr=0.002"], "running", None, 0.25, in_status=False)
    sw = tmp_path / "multirun" / "s1"
    sw.mkdir(parents=True)
    runs = [{"run_id": d.name, "run_dir": str(d), "overrides": o, "job_num": i, "job_id": None}
            for i, (d, o) in enumerate([(a, ["env.num_rollout=10", "algo.lr=0.001"]),
                                        (b, ["env.num_rollout=10", "algo.lr=0.002"])])]
    (sw / "sweep.json").write_text(json.dumps({"sweep_dir": str(sw), "runs": runs}))
    return tmp_path, sw


def test_status_rows_from_manifest(sweep):
    root, sw = sweep
    rows = fill(collect([str(sw)]))
    assert [r.run_id for r in rows] == ["r-a", "r-b"]
    assert [r.varying for r in rows] == [["algo.lr=0.001"], ["algo.lr=0.002"]]
    assert rows[0].reward == 0.5 and rows[1].reward == 0.25  # the second from metrics.jsonl
    assert rows[0].last_checkpoint == 9 and rows[0].state == "finished" and rows[1].state == "running"
    assert rows[0].resumed_from == [4]
    assert rows[0].scheduler is None  # no job id recorded: the run's own status is what we have
    assert rows[0].logs["trainer"].endswith("runs/r-a/logs/trainer.log")


def test_status_cli_table_json_and_run_ids(sweep, capsys, monkeypatch):
    root, sw = sweep
    monkeypatch.chdir(root)
    assert main(["status", str(sw)]) == 0
    out = capsys.readouterr().out
    assert "r-a" in out and "r-b" in out and "algo.lr=0.001" in out and "0.500" in out
    assert main(["status", "r-b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["run_id"] == "r-b" and rows[0]["varying"] == ["env.num_rollout=10", "algo.lr=0.002"]
    assert main(["status", str(root / "runs" / "r-a"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == "r-a"
    assert main(["status", "no-such-run"]) == 2
    assert "not a sweep directory" in capsys.readouterr().err


def test_cancel_dry_uses_job_ids_then_names(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r-j", ["algo.lr=1"], "running", 1, 0.1, job_id="4242")
    make_run(tmp_path, "r-n", ["algo.lr=2"], "running", 1, 0.1)
    monkeypatch.chdir(tmp_path)
    assert run_cancel(["r-j", "r-n"], dry=True) == 0
    err = capsys.readouterr().err
    assert "scancel 4242" in err and "scancel --name=r-n" in err
