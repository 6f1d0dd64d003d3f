"""W&B the way its users expect: the run named by its run id, grouped by its sweep (else the run id),
in the configured project (default `trainstack`, never the checkout's folder name); a restarted offline
run continues its `_step`; `trainstack sync RUN` uploads the offline dirs oldest first."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from conftest import ROOT, run_py
from trainstack.render.pipeline import build_from_overrides

NO_KEY = {"WANDB_API_KEY": "", "WANDB_SILENT": "true", "WANDB_MODE": ""}


def test_managed_names_follow_the_run_id_and_keep_what_the_config_sets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(["args.use_wandb=true", "run_id=wb-1"])
    assert run.args["wandb_group"] == "wb-1" and run.args["wandb_project"] == "trainstack"
    assert cmd.env["WANDB_RUN_ID"] == "wb-1" and cmd.env["WANDB_RESUME"] == "allow"
    i = cmd.argv.index("--wandb-project")
    assert cmd.argv[i + 1] == "trainstack"
    run, _ = build_from_overrides(["args.use_wandb=true", "tracking.wandb_project=rl", "args.wandb_group=mine"])
    assert run.args["wandb_project"] == "rl" and run.args["wandb_group"] == "mine"
    run, _ = build_from_overrides(["run_id=wb-2"])  # no W&B: nothing added
    assert "wandb_project" not in run.args and "wandb_group" not in run.args


def test_a_sweep_groups_its_runs_by_the_sweep(tmp_path):
    res = run_py("-m", "args.use_wandb=true", "algo.lr=1e-3,2e-3", "dry_run=true", "output=cmd.json",
                 f"hydra.sweep.dir={tmp_path}/multirun/lr-sweep", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for num in (0, 1):
        argv = json.loads((tmp_path / f"cmd.json.{num}").read_text())["argv"]
        assert argv[argv.index("--wandb-group") + 1] == "lr-sweep"
        assert argv[argv.index("--wandb-project") + 1] == "trainstack"


def _offline_runs(run_dir: Path) -> list[dict]:
    """Each offline dir (oldest first): id, display name, group, project and the _steps it logged."""
    from wandb.proto import wandb_internal_pb2 as pb

    from trainstack.metrics.wandb_offline import read_run, records
    from trainstack.reports.wandb_sync import offline_dirs

    out = []
    for d in offline_dirs(run_dir):
        (f,) = d.glob("run-*.wandb")
        info = read_run(f)
        names = []
        for payload in records(f):
            rec = pb.Record()  # type: ignore[attr-defined]
            rec.ParseFromString(payload)
            if rec.WhichOneof("record_type") == "run":
                names.append(rec.run.display_name)
        out.append({"dir": d, "id": info["run_id"], "group": info["group"], "project": info["project"],
                    "name": names[-1] if names else None, "steps": [r["_step"] for r in info["history"]]})
    return out


def test_a_resumed_offline_run_continues_and_sync_uploads_in_order(tmp_path):
    common = ["args.use_wandb=true", "run_id=wb-e2e", "env.rollout_batch_size=4", "env.n_samples_per_prompt=4",
              "env.global_batch_size=16", "env.save_interval=1", "env.eval_interval=100"]
    first = run_py(*common, "env.num_rollout=2", cwd=tmp_path, env=NO_KEY, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_py(*common, "env.num_rollout=3", cwd=tmp_path, env=NO_KEY, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    run_dir = tmp_path / "runs" / "wb-e2e"
    runs = _offline_runs(run_dir)
    assert len(runs) == 2, runs
    for r in runs:
        assert (r["id"], r["name"], r["group"], r["project"]) == ("wb-e2e", "wb-e2e", "wb-e2e", "trainstack"), r
    assert runs[0]["steps"] == list(range(len(runs[0]["steps"])))
    assert runs[1]["steps"] and min(runs[1]["steps"]) == max(runs[0]["steps"]) + 1  # continued, not from 0

    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "wandb-calls.jsonl"
    (fake / "wandb").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                                "sys.exit(int(os.environ.get('FAKE_WANDB_EXIT', '0')))\n")
    (fake / "wandb").chmod(0o755 | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    import subprocess

    sync = [sys.executable, "-m", "trainstack.cli.main", "sync", "wb-e2e"]
    res = subprocess.run(sync, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert calls == [["sync", str(runs[0]["dir"])], ["sync", str(runs[1]["dir"])]]  # oldest first
    assert "[1/2]" in res.stdout and "[2/2]" in res.stdout
    log.unlink()
    res = subprocess.run(sync, cwd=tmp_path, env={**env, "FAKE_WANDB_EXIT": "1"}, capture_output=True, text=True)
    assert res.returncode == 1 and "the 1 newer one not uploaded" in res.stderr
    assert len(log.read_text().splitlines()) == 1  # the first failed: the newer one is not uploaded before it
    res = subprocess.run([*sync[:-1], "no-such-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "no-such-run" in res.stderr
