"""slime version awareness: the host that runs the trainer refuses a slime checkout whose argument files
match no table trainstack has (packaged or built by `trainstack slime sync`), in the dry run and the launch
alike, with one message naming the key and the fix; the checkout is identified by content, never by a
declared commit; a remote launch defers the check to the host that executes it; the commit shown in logs is
read from git metadata without running git."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, files_under, run_py
from tests.fakes import fake_gpu_host, fake_slime_git
from trainstack.upstream.argtable import load_table
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.preflight.checks import preflight
from trainstack.upstream.slime_version import head_commit
from trainstack.upstream.select import checkout_problems

QWEN = ["experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true", "slime.root=slime"]  # this machine: ./slime
TABLE = load_table().slime_commit
OTHER = "0123456789abcdef0123456789abcdef01234567"


def preflight_errors(overrides: list[str], where: Path):
    old = os.getcwd()
    os.chdir(where)
    try:
        run, cmd = build_from_overrides(overrides)
        try:
            return preflight(run, cmd, launching=False), []
        except ConfigErrors as err:
            return None, err.errors
    finally:
        os.chdir(old)


def test_head_commit_reads_git_metadata_of_every_layout(tmp_path):
    detached = tmp_path / "detached"
    fake_slime_git(detached, OTHER)
    assert head_commit(detached) == OTHER
    branch = tmp_path / "branch" / ".git"
    (branch / "refs" / "heads").mkdir(parents=True)
    (branch / "HEAD").write_text("ref: refs/heads/main\n")
    (branch / "refs" / "heads" / "main").write_text(OTHER + "\n")
    assert head_commit(branch.parent) == OTHER
    (branch / "refs" / "heads" / "main").unlink()  # after `git pack-refs`
    (branch / "packed-refs").write_text(f"# pack-refs with: peeled\n{TABLE} refs/heads/main\n")
    assert head_commit(branch.parent) == TABLE
    # a submodule: `.git` is a file pointing into the superproject; a worktree's refs are in its common dir
    sub = tmp_path / "super" / "slime"
    sub.mkdir(parents=True)
    modules = tmp_path / "super" / ".git" / "worktrees" / "w" / "modules" / "slime"
    modules.mkdir(parents=True)
    (sub / ".git").write_text("gitdir: ../.git/worktrees/w/modules/slime\n")
    (modules / "HEAD").write_text("ref: refs/heads/pinned\n")
    (modules / "commondir").write_text("../../../..\n")
    (tmp_path / "super" / ".git" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / "super" / ".git" / "refs" / "heads" / "pinned").write_text(TABLE)
    assert head_commit(sub) == TABLE
    # no metadata at the root: never a parent repository's commit
    inner = tmp_path / "detached" / "inner"
    inner.mkdir()
    assert head_commit(inner) is None and head_commit(tmp_path / "missing") is None


def test_the_submodule_commit_is_what_git_says():
    if not (ROOT / "slime" / "train.py").is_file():
        pytest.skip("the slime/ submodule is not filled (`git submodule update --init slime`)")
    git = subprocess.run(["git", "-C", str(ROOT / "slime"), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert head_commit(ROOT / "slime") == git.stdout.strip() == TABLE


def test_a_checkout_of_unknown_content_is_refused_naming_the_sync_command(tmp_path):
    fake_gpu_host(tmp_path, QWEN)
    report, errors = preflight_errors(QWEN, tmp_path)
    assert errors == [] and report is not None  # the pin's content
    fake_slime_git(tmp_path / "slime", OTHER)
    res = run_py(*QWEN, "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    err = res.stderr
    assert "error: slime.root: the slime checkout" in err and "not a slime version trainstack has" in err, err
    assert f"trainstack slime sync --slime-root {tmp_path}/slime" in err and "slime v0.3.0" in err
    assert "Traceback" not in err and err.count("error: ") == 1
    before = files_under(tmp_path)
    launch = run_py(*QWEN, cwd=tmp_path)  # the launch refuses the same way, before anything is written
    assert launch.returncode == 2 and "trainstack slime sync" in launch.stderr and files_under(tmp_path) == before


def test_content_decides_not_git_metadata_nor_a_declared_commit(tmp_path, monkeypatch):
    fake_gpu_host(tmp_path, QWEN)
    import shutil

    shutil.rmtree(tmp_path / "slime" / ".git")  # an image without git metadata: its files say which slime it is
    assert preflight_errors(QWEN, tmp_path)[1] == []
    (tmp_path / "slime" / ".git").mkdir()
    (tmp_path / "slime" / ".git" / "HEAD").write_text(OTHER + "\n")  # a commit the content contradicts
    monkeypatch.setenv("TRAINSTACK_SLIME_COMMIT", OTHER)  # no longer read
    assert preflight_errors(QWEN, tmp_path)[1] == []


def test_remote_launch_defers_the_check_and_the_executing_host_runs_it(tmp_path):
    report, errors = preflight_errors([*QWEN, "cluster=slurm_8xh100"], tmp_path)
    assert errors == []  # the checkout is on the SLURM host, not here
    assert any(d.startswith(f"slime checkout {tmp_path}/slime is a slime version trainstack knows") for d in report.deferred)
    # on the executing host (`trainstack exec` -> check_stored -> host_problems) the checkout is checked
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run, cmd = build_from_overrides(QWEN)
    finally:
        os.chdir(old)
    from trainstack.preflight.host_checks import HostFacts, slime_checkout_problems

    fake_gpu_host(tmp_path, QWEN)
    facts = HostFacts.from_run(run, cmd)
    assert slime_checkout_problems(facts) == []
    fake_slime_git(tmp_path / "slime", OTHER)
    problems = slime_checkout_problems(facts)
    assert len(problems) == 1 and "trainstack slime sync" in problems[0].fix


def test_the_tiny_backend_checks_the_slime_it_runs(tmp_path):
    """The CPU backend runs slime's rollout code from slime.root: a checkout of unknown content there is
    refused as for a GPU run (it used to be ignored for the submodule beside the package)."""
    fake_slime_git(tmp_path / "slime", OTHER)  # ./slime where the run is launched: the run's slime.root
    res = run_py("dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "error: slime.root: the slime checkout" in res.stderr, res.stderr
    assert "not a slime version trainstack has" in res.stderr and "trainstack slime sync" in res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("error: ") == 1
    assert run_py("dry_run=true", f"slime.root={ROOT / 'slime'}", cwd=tmp_path).returncode == 0


def test_the_check_spawns_no_process_and_is_cheap(tmp_path, monkeypatch):
    fake_slime_git(tmp_path, OTHER)
    (tmp_path / "train.py").write_text("")

    def no_spawn(*a, **kw):
        raise AssertionError("the version check must not run git")

    monkeypatch.setattr(subprocess, "Popen", no_spawn)
    start = time.perf_counter()
    for _ in range(200):
        errors = checkout_problems(tmp_path)
    per_check = (time.perf_counter() - start) / 200
    assert len(errors) == 1 and per_check < 0.01, per_check  # hashes two files per known table
