"""`trainstack exec DIR` runs exactly DIR: a moved or copied run dir is that run (its checkpoints,
logs and spec are the ones under DIR), never the directory its spec was first written in; a copy
whose original is being run right now is refused, naming the original and the fix."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_py

SMALL = ["env.num_rollout=4", "args.save_interval=2", "env.eval_interval=null"]


def trainstack(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "trainstack", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def snapshot(d: Path) -> dict[str, float]:
    return {str(p.relative_to(d)): p.stat().st_mtime for p in sorted(d.rglob("*"))}


def live_lease(run_dir: Path) -> None:
    """The lease of a run being run right now (this test process holds it)."""
    from trainstack.fencing.lease import hostname

    now = time.time()
    (run_dir / "lease.json").write_text(json.dumps({
        "token": "t" * 32, "host": hostname(), "pid": os.getpid(), "since": now, "heartbeat": now,
        "expires_at": now + 600, "ttl_s": 600, "epoch": 7, "trainer_pgid": None}))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished 4-rollout run (checkpoints at iterations 1 and 3) under A/."""
    work = tmp_path_factory.mktemp("exec_dir")
    res = run_py(*SMALL, "run_id=killed", "paths.runs_root=A", cwd=work, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (work / "A" / "killed" / "checkpoints" / "iter_0000003").is_dir()
    return work / "A" / "killed"


def test_rebase_moves_every_path_under_the_old_run_dir(finished_run, tmp_path):
    from trainstack.run import spec as runspec

    copy = tmp_path / "B" / "killed"
    shutil.copytree(finished_run, copy)
    spec = runspec.load(copy)
    old = str(finished_run.resolve())
    assert spec.run_dir == str(copy.resolve())
    stored = json.dumps([spec.command, spec.args, spec.config, spec.inputs])
    assert old + "/" not in stored and f'"{old}"' not in stored
    assert spec.args["save"] == str(copy.resolve() / "checkpoints")
    assert spec.slime_command().env["TENSORBOARD_DIR"].startswith(str(copy.resolve()))
    assert spec.data_root == runspec.load(finished_run).data_root  # outside the run dir: unchanged
    assert runspec.load(finished_run) == runspec.RunSpec.from_json(
        json.loads((finished_run / "spec.json").read_text()), "x")  # in place: nothing moves


def test_copy_of_a_live_run_is_refused_with_the_fix(finished_run, tmp_path):
    original = tmp_path / "A" / "live"
    shutil.copytree(finished_run, original)
    spec = json.loads((original / "spec.json").read_text())
    old = spec["run_dir"]
    text = (original / "spec.json").read_text().replace(old, str(original.resolve()))
    (original / "spec.json").write_text(text)  # a run dir whose spec names itself
    copy = tmp_path / "B" / "live"
    shutil.copytree(original, copy)
    live_lease(original)
    before = snapshot(copy)
    res = trainstack("exec", str(copy), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert str(original.resolve()) in res.stderr and "being run right now" in res.stderr
    assert "fix" in res.stderr and "trainstack exec" in res.stderr
    assert snapshot(copy) == before
    (original / "lease.json").unlink()  # the original has ended: the copy is a run of its own now
    from trainstack.run import spec as runspec

    assert runspec.load(copy).run_dir == str(copy.resolve())


@pytest.mark.slow
def test_exec_of_a_moved_run_dir_resumes_there_and_writes_nothing_else(finished_run, tmp_path):
    """mv A/killed B/: `exec killed --runs-root B` resumes B/killed from its newest checkpoint; A/ stays
    empty. (Before: A/killed was retrained from zero while B/killed was untouched.)"""
    work = tmp_path
    made_at = work / "A" / "killed"
    shutil.copytree(finished_run, made_at)
    for name in ("spec.json", "args.json", "command.json"):  # as if it had been run in work/A/killed
        text = (made_at / name).read_text()
        (made_at / name).write_text(text.replace(str(finished_run.resolve()), str(made_at.resolve())))
    (work / "B").mkdir()
    moved = work / "B" / "killed"
    made_at.rename(moved)
    # the last checkpoint lost (as if killed before it was published): the run must resume from iter 1
    shutil.rmtree(moved / "checkpoints" / "iter_0000003")
    (moved / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    spec_before = json.loads((moved / "spec.json").read_text())
    assert spec_before["run_dir"] == str(made_at.resolve())
    res = trainstack("exec", "killed", "--runs-root", "B", cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    assert list((work / "A").iterdir()) == []  # nothing written where the spec was first made
    events = [json.loads(ln) for ln in (moved / "events.jsonl").read_text().splitlines() if ln.strip()]
    resume = [e for e in events if e["event"] == "resume"]
    assert resume and resume[-1]["from_rollout"] == 2, events[-3:]
    assert all(str(made_at) not in a for a in resume[-1]["argv"])
    assert str(moved.resolve() / "checkpoints") in resume[-1]["argv"]
    assert (moved / "checkpoints" / "iter_0000003" / "meta.json").is_file()
    assert json.loads((moved / "spec.json").read_text())["run_dir"] == str(moved.resolve())
    assert json.loads((moved / "status.json").read_text())["state"] == "finished"
