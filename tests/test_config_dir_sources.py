"""`--config-dir` recipes: the dry run attributes each value to the file Hydra took it from (the
recipe in your directory), not to the packaged `conf/algo/grpo.yaml` / `conf/env/arithmetic.yaml`; an
experiment there outranks the group files as a packaged one does."""
from __future__ import annotations

import re

from conftest import run_py

RECIPE = """# @package _global_
defaults:
  - override /model: tiny
  - override /algo: grpo
  - override /env: arithmetic
name: mine
algo:
  lr: 0.002
env:
  rollout_batch_size: 8
"""


def flag_line(out: str, flag: str) -> str:
    return next(ln for ln in out.splitlines() if re.match(rf"\s+{flag}\s", ln))


def test_experiment_and_group_files_from_a_config_dir_are_named(tmp_path):
    mine = tmp_path / "my-conf"
    (mine / "experiment").mkdir(parents=True)
    (mine / "experiment" / "mine.yaml").write_text(RECIPE)
    (mine / "algo").mkdir()
    (mine / "algo" / "myalgo.yaml").write_text("lr: 0.003\neps_clip: 0.3\nmeta: {}\n")
    res = run_py("--config-dir", str(mine), "experiment=mine", "dry_run=true", cwd=tmp_path, env={"COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    assert f"{mine}/experiment/mine.yaml (over 0.001 from conf/model/tiny.yaml)" in flag_line(res.stdout, "--lr")
    assert flag_line(res.stdout, "--rollout-batch-size").rstrip().endswith(f"{mine}/experiment/mine.yaml")
    res = run_py("--config-dir", str(mine), "algo=myalgo", "dry_run=true", cwd=tmp_path, env={"COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    assert flag_line(res.stdout, "--eps-clip").rstrip().endswith(f"{mine}/algo/myalgo.yaml")
    assert " conf/algo/myalgo.yaml" not in res.stdout


def test_the_python_api_names_the_config_dir_file_too(tmp_path):
    from trainstack.api import Run

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(RECIPE)
    run = Run.compose([f"paths.runs_root={tmp_path}/runs"], experiment="mine", config_dir=tmp_path)
    assert run._resolved is not None
    assert run._resolved.source("lr").startswith(f"{tmp_path}/experiment/mine.yaml")
    assert run._resolved.source("weight_decay") == "conf/algo/grpo.yaml"
