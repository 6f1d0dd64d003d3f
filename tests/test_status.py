"""`trainstack status` / `cancel` on run directories and sweep manifests (no SLURM needed): numbers
from what the run did, tables that fit the terminal, every run when no target is given."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import ROOT
from tests.fakes import write_checkpoint
from trainstack.cli.main import main
from trainstack.run.rundir import RunDir
from trainstack.reports.status import collect, fill, run_cancel


def make_run(root: Path, run_id: str, overrides: list[str], state: str, ckpt: int | None, rewards: list[float],
             target: int = 10, job_id: str | None = None, status_says: dict | None = None) -> Path:
    """A run dir as the lifecycle leaves it; `status_says` overrides what status.json claims."""
    d = root / "runs" / run_id
    d.mkdir(parents=True)
    (d / "args.json").write_text(json.dumps({"num_rollout": target, "lr": 0.001}))
    status = {"run_id": run_id, "state": state, "last_checkpoint": ckpt, "num_rollout": target,
              **({"launcher": "slurm"} if job_id else {}),
              "last_metrics": {"rollout/raw_reward": rewards[-1]} if rewards else {}, **(status_says or {})}
    (d / "status.json").write_text(json.dumps(status))
    if rewards:
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step_key": "rollout/step", "step": i, "metrics": {
            "rollout/raw_reward": r}}) + "\n" for i, r in enumerate(rewards)))
    if ckpt is not None:
        write_checkpoint(d / "checkpoints", ckpt)
    (d / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "events.jsonl").write_text(json.dumps({"event": "launch"}) + "\n"
                                    + json.dumps({"event": "resume", "from_rollout": 4}) + "\n")
    if job_id:
        (d / "slurm.json").write_text(json.dumps({"run_id": run_id, "job_id": job_id, "job_name": run_id,
                                                  "logs": {"stdout": f"/x/{job_id}_0_log.out"}}))
    return d


@pytest.fixture
def sweep(tmp_path):
    a = make_run(tmp_path, "r-a", ["env.num_rollout=10", "algo.lr=0.001"], "finished", 9, [0.1] * 9 + [0.5])
    b = make_run(tmp_path, "r-b", ["env.num_rollout=10", "algo.lr=0.002"], "running", None, [0.1, 0.25])
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
    assert rows[0].reward == 0.5 and rows[1].reward == 0.25
    assert rows[0].last_checkpoint == 9 and rows[0].state == "finished" and rows[1].state == "running"
    assert (rows[0].rollouts, rows[0].target, rows[1].rollouts, rows[1].last_checkpoint) == (10, 10, 2, None)
    assert rows[0].resumed_from == [4]
    assert rows[0].scheduler is None  # no job id recorded: the run's own status is what we have
    assert rows[0].logs["trainer"].endswith("runs/r-a/logs/trainer.log")


def test_numbers_come_from_the_run_not_from_the_last_launch(tmp_path, capsys, monkeypatch):
    """A no-op relaunch of a finished 300-rollout run with num_rollout=40 rewrote status.json; the
    checkpoint and the metrics still say 300 rollouts, and status/compare say so."""
    make_run(tmp_path, "r-300", [], "finished", 299, [0.2] * 300, target=300,
             status_says={"num_rollout": 40, "last_checkpoint": 39})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["status", "r-300", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["last_checkpoint"], row["rollouts"], row["target"]) == (299, 300, 300)
    assert main(["status", "r-300"]) == 0
    out = capsys.readouterr().out
    assert "299/40" not in out and "/40" not in out and re.search(r"│\s+300\s+│", out), out
    assert main(["compare", "r-300", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["rollouts"] == 300


def test_metrics_written_twice_for_a_step_count_once(tmp_path):
    """After a resume the redone rollouts are in metrics.jsonl twice: the last write wins."""
    d = make_run(tmp_path, "r-dup", [], "finished", 7, [0.1 * i for i in range(8)], target=8)
    with open(d / "metrics.jsonl", "a") as f:  # rollouts 6 and 7 redone after a resume from iter 5
        for step, r in ((6, 0.66), (7, 0.77)):
            f.write(json.dumps({"step_key": "rollout/step", "step": step, "metrics": {"rollout/raw_reward": r}}) + "\n")
    latest, rewards = RunDir(d).last_metrics()
    assert len(rewards) == 8 and rewards[-2:] == [0.66, 0.77] and latest["rollout/raw_reward"] == 0.77
    row = fill(collect([str(d)]))[0]
    assert (row.rollouts, row.reward) == (8, 0.77)


def test_status_cli_table_json_and_run_ids(sweep, capsys, monkeypatch):
    root, sw = sweep
    monkeypatch.chdir(root)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["status", str(sw)]) == 0
    out = capsys.readouterr().out
    assert "r-a" in out and "r-b" in out and "algo.lr=0.001" in out and "0.500" in out and "2/10" in out
    assert main(["status", "r-b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["run_id"] == "r-b" and rows[0]["varying"] == ["env.num_rollout=10", "algo.lr=0.002"]
    assert main(["status", str(root / "runs" / "r-a"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == "r-a"
    with pytest.raises(SystemExit) as exc:
        main(["status", "no-such-run"])
    assert exc.value.code == 2 and "not a sweep directory" in capsys.readouterr().err


def test_status_without_targets_lists_every_run_under_the_runs_root(sweep, capsys, monkeypatch):
    root, _ = sweep
    make_run(root, "r-c", ["algo.lr=0.003"], "failed", 3, [0.3])
    monkeypatch.chdir(root)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["status", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["r-a", "r-b", "r-c"]
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "runs under runs" in out and all(rid in out for rid in ("r-a", "r-b", "r-c"))
    monkeypatch.chdir(root / "multirun" / "s1")  # inside a sweep dir: that sweep
    assert main(["status", "--json", "--runs-root", str(root / "runs")]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["r-a", "r-b"]
    monkeypatch.chdir(root / "multirun")
    assert main(["status"]) == 0
    assert "no runs under runs" in capsys.readouterr().err


@pytest.mark.parametrize("columns", [80, 100])
def test_status_table_fits_the_terminal(sweep, capsys, monkeypatch, columns):
    root, sw = sweep
    monkeypatch.chdir(root)
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["status", str(sw)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= columns, out
    for value in ("r-a", "r-b", "finished", "running", "0.500", "0.250", "10", "2/10"):
        assert value in out, (value, out)
    assert "…" not in out
    hidden = re.search(r"left out to fit \d+ columns: (.*); --wide shows all", " ".join(lines))
    header = next(ln for ln in lines if "run_id" in ln)
    left_out = hidden.group(1).split(", ") if hidden else []
    for col in ("run_id", "run", "rollouts", "reward", "ckpt", "logs"):  # shown, or named as left out
        assert re.search(rf"┃ {col}\s", header) or col in left_out, (col, out)
    body = [ln for ln in lines if ln.startswith("│")]
    assert len(body) <= 2 * 2, out  # a row is at most 2 lines (it folded over 4-12)
    for col in ("started", "duration"):  # when each run started, how long it trained
        assert re.search(rf"┃ {col}\s", header) or col in left_out, (col, out)
    if columns == 80:
        assert "logs" in left_out and "started" not in left_out
    assert main(["status", str(sw), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "logs" in wide and "trainer.log" in wide and "left out" not in wide


def test_cancel_dry_uses_job_ids_then_names(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r-j", ["algo.lr=1"], "running", 1, [0.1], job_id="4242")
    make_run(tmp_path, "r-n", ["algo.lr=2"], "running", 1, [0.1], status_says={"launcher": "slurm"})
    monkeypatch.chdir(tmp_path)
    assert run_cancel(["r-j", "r-n"], dry=True) == 0
    err = capsys.readouterr().err
    assert "scancel 4242" in err and "scancel --name=r-n" in err


def test_started_and_duration_come_from_the_launches():
    """events.jsonl: each launch or resume opens a stretch of training, its exit closes it; one killed (no
    exit) ends at its last event; a running run's open stretch ends now."""
    from trainstack.reports.status_view import started_cell, timing

    ev = [{"time": "2026-01-02T10:00:00+00:00", "event": "launch"},
          {"time": "2026-01-02T10:02:00+00:00", "event": "exit"},
          {"time": "2026-01-02T11:00:00+00:00", "event": "resume"},
          {"time": "2026-01-02T11:00:30+00:00", "event": "hub_push"},  # then SIGKILL: no exit
          {"time": "2026-01-02T12:00:00+00:00", "event": "resume"}]
    import datetime as dt

    now = dt.datetime(2026, 1, 2, 12, 1, tzinfo=dt.timezone.utc)
    assert timing(ev, running=True, now=now) == ("2026-01-02T10:00:00+00:00", 120 + 30 + 60)
    assert timing(ev, running=False, now=now)[1] == 150
    assert timing([{"event": "launch"}], running=False) == (None, None)  # no time recorded: unknown
    local = dt.datetime(2026, 1, 2, 10, 0, tzinfo=dt.timezone.utc).astimezone()
    assert started_cell("2026-01-02T10:00:00+00:00", today=local.date()) == local.strftime("%H:%M")
    assert started_cell("2026-01-02T10:00:00+00:00", today=dt.date(2027, 1, 1)) == local.strftime("%m-%d %H:%M")


def test_compact_cells_have_a_legend_and_a_dropped_reason_is_still_said(tmp_path, capsys, monkeypatch):
    """`e1 x0` had no legend; a Lium run's `submitted 0/6` hid its reason (another commander holds the port)
    in a column the width left out."""
    from trainstack.reports.status import Row
    from trainstack.reports.status_view import render

    rows = [Row(run_id="pod-run", run_dir=str(tmp_path), state="submitted", rollouts=0, target=6, pod="abcdef123456",
                epoch=1, restarts=0, cost_usd=0.0042, scheduler="lium ?", job_id="abcdef12",
                reason="commander: 401 the token is not this commander's"),
            Row(run_id="local-run", run_dir=str(tmp_path), state="finished, resumed x1", rollouts=6, target=6)]
    monkeypatch.setenv("COLUMNS", "80")
    render(rows)
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= 80, out
    flat = " ".join(out.split())
    assert "pod: `POD eEPOCH xRESTARTS $COST`" in flat and "abcdef12 e1 x0" in flat and "$0.0042" in flat
    assert "pod-run: lium ?: commander: 401 the token is not this commander's" in flat  # scheduler column left out
    assert "-: not known yet" in flat and "rollouts: trained, or trained/asked" in flat


def test_watch_shows_the_table_again_until_every_run_has_ended(tmp_path, monkeypatch, capsys):
    from trainstack.reports.status_view import watch

    states = iter(["running", "running", "finished"])
    shown: list[str] = []
    monkeypatch.setattr("trainstack.reports.status_view.time.sleep", lambda s: shown.append(f"sleep {s}"))
    assert watch(lambda: shown.append(next(states)), 2.0, ended=lambda: shown[-1] == "finished") == 0
    assert shown == ["running", "sleep 2.0", "running", "sleep 2.0", "finished"]
    assert capsys.readouterr().out.count("trainstack status --watch: ") == 3


@pytest.mark.slow
def test_cancel_reports_what_it_did(tmp_path):
    """`cancel` printed `kill -TERM 331  # r1 (local)`, which reads as advice; it says what it sent and how the
    run ended."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "run_id=c1", "env.num_rollout=400",
                            "args.save_interval=1000"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    log = tmp_path / "runs" / "c1" / "logs" / "trainer.log"
    try:
        deadline = time.monotonic() + 120
        while not (log.is_file() and "rollout 2/" in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        dry = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "cancel", "c1", "--dry"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
        assert dry.returncode == 0 and re.search(r"c1: would send SIGTERM to its launcher \(pid \d+, local\) \(--dry",
                                                 dry.stderr), dry.stderr
        res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "cancel", "c1"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        run.wait(timeout=120)
    assert res.returncode == 0 and "kill -TERM" not in res.stderr
    assert re.search(r"c1: sent SIGTERM to its launcher \(pid \d+, local\); the trainer saves a final checkpoint",
                     res.stderr), res.stderr
    assert re.search(r"c1: interrupted after [\d.]+ s, newest checkpoint iter_\d{7}; the launch command resumes it",
                     res.stderr), res.stderr
