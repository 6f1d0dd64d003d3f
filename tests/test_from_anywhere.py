"""status/logs/cancel for any run from anywhere: `$TRAINSTACK_RUNS_ROOT` is where runs are written and
where run ids are looked up, hints name the run the way those commands find it (and `trainstack run`
outside a checkout), a local run is cancelled through its launcher (never scancel), and a hint's
`write key=value` is not taken for a secret."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_py
from trainstack.config import userconfig


def cli(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack.cli.main", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})})


def stored(root: Path, monkeypatch, run_id: str = "anywhere"):
    """A submitted local run under `root` (spec.json and its views, as a launch stores them)."""
    from trainstack.api import Run
    from trainstack.run.rundir import RunDir

    monkeypatch.setenv(userconfig.RUNS_ROOT_ENV, str(root))
    spec = Run.compose([f"run_id={run_id}", f"paths.data_root={root.parent}/data"]).spec()
    RunDir(spec.run_dir).write_spec(spec)
    return spec


def test_the_runs_root_variable_places_runs_and_finds_them_from_any_directory(tmp_path, monkeypatch):
    root = tmp_path / "my-runs"
    spec = stored(root, monkeypatch)
    assert Path(spec.run_dir) == root / "anywhere"  # conf's paths.runs_root follows the variable
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {userconfig.RUNS_ROOT_ENV: str(root)}
    res = cli("status", "anywhere", cwd=elsewhere, env=env)
    assert res.returncode == 0 and "anywhere" in res.stdout, res.stderr
    res = cli("status", cwd=elsewhere, env=env)
    assert res.returncode == 0 and f"runs under {root}" in res.stdout, res.stderr
    assert cli("status", "anywhere", cwd=elsewhere, env={userconfig.RUNS_ROOT_ENV: ""}).returncode == 2  # ./runs
    dry = run_py("run_id=placed", "dry_run=true", cwd=elsewhere, env={**env, "COLUMNS": "300"})
    assert dry.returncode == 0 and f"# run dir {root}/placed" in dry.stdout, dry.stderr


def test_cancel_of_a_local_run_asks_its_launcher_not_scancel(tmp_path, monkeypatch):
    stored(tmp_path / "runs", monkeypatch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scancel-called"
    (bin_dir / "scancel").write_text(f"#!/bin/sh\ntouch {calls}\n")
    (bin_dir / "scancel").chmod(0o755)
    env = {userconfig.RUNS_ROOT_ENV: str(tmp_path / "runs"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for dry in (["--dry"], []):
        res = cli("cancel", "anywhere", *dry, cwd=tmp_path, env=env)
        assert res.returncode == 1 and "anywhere is not running" in res.stderr, res.stderr
        assert "scancel" not in res.stdout + res.stderr
    assert not calls.exists()


def test_hints_name_the_run_as_status_finds_it(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "r1"
    monkeypatch.setenv(userconfig.RUNS_ROOT_ENV, str(tmp_path / "runs"))
    assert userconfig.run_target("r1", run_dir) == "r1" and userconfig.runs_root_flag(run_dir) == ""
    other = tmp_path / "scratch" / "r1"
    assert userconfig.run_target("r1", other) == str(other)
    assert userconfig.runs_root_flag(other) == f" --runs-root {other.parent}"


def test_hints_say_trainstack_run_outside_a_checkout(tmp_path, monkeypatch):
    from trainstack.reports.display import print_summary

    spec = stored(tmp_path / "runs", monkeypatch)
    for cwd, launch in ((tmp_path, "trainstack run run_id=anywhere"), (ROOT, "python run.py run_id=anywhere")):
        monkeypatch.chdir(cwd)
        out = io.StringIO()
        print_summary(spec, 0, file=out)
        resume = next(ln for ln in out.getvalue().splitlines() if ln.startswith("resume"))
        assert launch in resume, out.getvalue()
        assert "--runs-root" not in out.getvalue()  # the run is under $TRAINSTACK_RUNS_ROOT


def test_a_hint_placeholder_is_not_scrubbed_as_a_secret(tmp_path):
    res = run_py("=5", cwd=tmp_path)
    assert res.returncode == 2
    assert "fix   : write key=value, e.g. algo.lr=1e-6" in res.stderr and "<redacted>" not in res.stderr
