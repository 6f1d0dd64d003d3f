"""Hydra's own flags work through run.py's override pre-check, and --help is trainstack's page."""
from __future__ import annotations

import pytest

from conftest import run_py


@pytest.mark.parametrize("args,expect", [
    (["--cfg", "job"], "dry_run: false"),
    (["-c", "job"], "dry_run: false"),
    (["--cfg=job"], "dry_run: false"),
    (["--cfg", "hydra"], "hydra:"),
    (["--cfg", "all"], "hydra:"),
    (["--cfg", "job", "--resolve", "algo.lr=0.002"], "lr: 0.002"),
    (["-c", "job", "--package", "algo"], "# @package algo"),
    (["--info", "defaults"], "Defaults List"),
    (["--info"], "Hydra"),
    (["-sc", "install=bash"], "hydra_bash_completion"),
])
def test_hydra_flag_works(args, expect):
    res = run_py(*args)
    assert res.returncode == 0, res.stderr
    assert expect in res.stdout
    assert "Traceback" not in res.stderr


def test_overrides_next_to_flags_are_still_checked():
    res = run_py("--cfg", "job", "args.rollout_batchsize=3")
    assert res.returncode == 2 and "did you mean 'args.rollout_batch_size'" in res.stderr


def test_help_is_trainstacks_page():
    res = run_py("--help")
    assert res.returncode == 0
    assert res.stdout.startswith("trainstack: compose a slime")
    assert "model: " in res.stdout and "qwen3-4B" in res.stdout and "trainstack args --rollout-batch-size" in res.stdout


def test_user_config_dir_adds_an_experiment(tmp_path):
    exp = tmp_path / "experiment"
    exp.mkdir()
    (exp / "mine.yaml").write_text("# @package _global_\nname: mine\nalgo:\n  lr: 0.0005\n")
    res = run_py("--config-dir", str(tmp_path), "experiment=mine", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "mine-" in res.stdout and "--lr" in res.stdout and "0.0005" in res.stdout
