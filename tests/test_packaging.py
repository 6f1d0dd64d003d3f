"""`pip install .` (not editable) from a clone gives working `trainstack` and `trainstack run`
commands from any directory, with conf/ shipped as package data and a user's own config dir."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_run_spec import copy_project

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_pip_install_then_render_and_run_from_anywhere(tmp_path):
    clone = copy_project(tmp_path / "clone")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(clone)], capture_output=True, text=True,
                         timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    import shutil

    shutil.rmtree(clone)  # the installed package must not need the clone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ts = str(venv / "bin" / "trainstack")

    r = subprocess.run([ts, "render", "experiment=qwen3-4B-grpo-dapo"], cwd=elsewhere, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rendered = json.loads(r.stdout)
    assert "--rollout-batch-size" in rendered["argv"] and rendered["entrypoint"][-1] == f"{elsewhere}/slime/train.py"

    # a user's experiments live outside the package: Hydra's --config-dir adds them to the search path
    mine = tmp_path / "my_conf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\ndefaults:\n  - override /model: qwen3-4B\n"
                                    "  - override /cluster: lium_8xh100\nname: mine\nalgo:\n  lr: 3.0e-6\n")
    r = subprocess.run([ts, "run", "--config-dir", str(tmp_path / "my_conf"), "experiment=mine", "dry_run=true"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # a remote launcher: the checkout is looked for where the run was composed, and its check is deferred
    assert "--lr 3e-06" in r.stdout and f"slime checkout: {elsewhere}/slime (train.py NOT present" in r.stdout, \
        r.stdout[-2000:]
    assert not (elsewhere / "runs").exists()
