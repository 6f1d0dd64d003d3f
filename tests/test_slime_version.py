"""slime version awareness: the host that runs the trainer refuses a slime checkout at another commit
than the argument table's, in the dry run and the launch alike, with one message naming the key,
both commits and the fix; the commit is read from git metadata without running git; a remote
launch defers the check to the host that executes it; the tiny backend does not use slime."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, files_under, run_py
from tests.fakes import fake_gpu_host, fake_slime_git
from trainstack.argtable import load_table
from trainstack.errors import ConfigErrors
from trainstack.pipeline import build_from_overrides
from trainstack.preflight import preflight
from trainstack.slime_version import DECLARED_ENV, checkout_commit, head_commit, same_commit, version_problems

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


def test_a_checkout_at_another_commit_is_refused_with_both_commits_and_the_fix(tmp_path):
    fake_gpu_host(tmp_path, QWEN)
    report, errors = preflight_errors(QWEN, tmp_path)
    assert errors == [] and report is not None  # at the table's commit
    fake_slime_git(tmp_path / "slime", OTHER)
    res = run_py(*QWEN, "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    err = res.stderr
    assert "error: slime.root: the slime checkout" in err and OTHER in err and TABLE in err, err
    assert "python -m trainstack.tools.sync_slime args --slime-root" in err and f"pin slime to {TABLE}" in err
    assert "Traceback" not in err and err.count("error: ") == 1
    before = files_under(tmp_path)
    launch = run_py(*QWEN, cwd=tmp_path)  # the launch refuses the same way, before anything is written
    assert launch.returncode == 2 and OTHER in launch.stderr and files_under(tmp_path) == before


def test_a_copy_without_git_metadata_must_declare_its_commit(tmp_path, monkeypatch):
    fake_gpu_host(tmp_path, QWEN)
    import shutil

    shutil.rmtree(tmp_path / "slime" / ".git")
    monkeypatch.delenv(DECLARED_ENV, raising=False)
    _, errors = preflight_errors(QWEN, tmp_path)
    assert [e.key for e in errors] == ["slime.root"]
    assert "cannot tell which slime commit" in errors[0].problem and DECLARED_ENV in errors[0].fix
    monkeypatch.setenv(DECLARED_ENV, TABLE[:8])  # an image declares it (docker/Dockerfile)
    assert preflight_errors(QWEN, tmp_path)[1] == []
    monkeypatch.setenv(DECLARED_ENV, OTHER)
    _, errors = preflight_errors(QWEN, tmp_path)
    assert OTHER in errors[0].problem and f"${DECLARED_ENV}" in errors[0].problem
    # git metadata, when there is some, is the truth
    fake_slime_git(tmp_path / "slime")
    assert checkout_commit(tmp_path / "slime") == (TABLE, "its git HEAD")


def test_remote_launch_defers_the_check_and_the_executing_host_runs_it(tmp_path):
    report, errors = preflight_errors([*QWEN, "cluster=slurm_8xh100"], tmp_path)
    assert errors == []  # the checkout is on the SLURM host, not here
    assert f"slime checkout {tmp_path}/slime is at slime {TABLE[:12]} (the argument table's commit)" in report.deferred
    # on the executing host (`trainstack exec` -> check_stored -> host_problems) the checkout is checked
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run, cmd = build_from_overrides(QWEN)
    finally:
        os.chdir(old)
    from trainstack.host import HostFacts, slime_checkout_problems

    fake_gpu_host(tmp_path, QWEN)
    facts = HostFacts.from_run(run, cmd)
    assert slime_checkout_problems(facts) == []
    fake_slime_git(tmp_path / "slime", OTHER)
    problems = slime_checkout_problems(facts)
    assert len(problems) == 1 and OTHER in problems[0].problem


def test_the_tiny_backend_checks_the_slime_it_runs(tmp_path):
    """The CPU backend runs slime's rollout code from slime.root: a checkout at another commit there is
    refused as for a GPU run (it used to be ignored for the submodule beside the package)."""
    fake_slime_git(tmp_path / "slime", OTHER)
    (tmp_path / "slime" / "slime").mkdir()
    (tmp_path / "slime" / "slime" / "__init__.py").write_text("")
    res = run_py("dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "error: slime.root: the slime checkout" in res.stderr, res.stderr
    assert OTHER in res.stderr and f"pin slime to {TABLE}" in res.stderr and "Traceback" not in res.stderr
    assert run_py("dry_run=true", f"slime.root={ROOT / 'slime'}", cwd=tmp_path).returncode == 0


def test_the_check_spawns_no_process_and_is_cheap(tmp_path, monkeypatch):
    fake_slime_git(tmp_path, OTHER)
    (tmp_path / "train.py").write_text("")

    def no_spawn(*a, **kw):
        raise AssertionError("the version check must not run git")

    monkeypatch.setattr(subprocess, "Popen", no_spawn)
    start = time.perf_counter()
    for _ in range(1000):
        errors = version_problems(tmp_path, TABLE)
    per_check = (time.perf_counter() - start) / 1000
    assert len(errors) == 1 and per_check < 0.005, per_check  # a `git rev-parse` spawn alone takes ~5-10 ms


def test_commits_compare_full_or_abbreviated():
    assert same_commit(TABLE, TABLE[:8]) and same_commit(TABLE[:7], TABLE)
    assert not same_commit(TABLE, TABLE[:6]) and not same_commit(TABLE, OTHER)


def test_the_image_declares_the_table_commit():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert f"ARG SLIME_COMMIT={TABLE}\n" in dockerfile and "TRAINSTACK_SLIME_COMMIT=${SLIME_COMMIT}" in dockerfile
    assert DECLARED_ENV == "TRAINSTACK_SLIME_COMMIT"
