"""A local sweep as a whole: checked before the first point runs, shared run ids refused, a
summary at the end and a non-zero exit when a point failed, no empty folders from dry runs."""
from __future__ import annotations

import pytest

from conftest import files_under, run_py

FAST = ["env.num_rollout=2", "args.save_interval=1", "args.eval_interval=null"]


def test_points_sharing_a_run_id_are_refused_naming_the_key(tmp_path):
    res = run_py("-m", "env.num_rollout=3,4", "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 2
    assert "2 points would be the same run" in res.stderr and "env.num_rollout" in res.stderr
    assert files_under(tmp_path) == []


def test_an_invalid_point_stops_the_sweep_before_anything_runs(tmp_path):
    res = run_py("-m", "model.hidden_size=64,65", *FAST, "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 2
    assert "point 1 [model.hidden_size=65" in res.stderr
    assert files_under(tmp_path) == []


def test_dry_run_sweep_leaves_no_empty_point_folders(tmp_path):
    res = run_py("-m", "algo.lr=1e-3,2e-3", "dry_run=true", "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not [p for p in (tmp_path / "sw").iterdir() if p.is_dir()]


def test_a_point_whose_plugin_cannot_be_found_stops_the_sweep_first(tmp_path):
    res = run_py("-m", "args.custom_rm_path=trainstack.tiny.arithmetic.reward,trainstack.nope.reward", *FAST,
                 "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 2 and "point 1 [" in res.stderr and "no module 'trainstack.nope'" in res.stderr
    assert files_under(tmp_path) == []


@pytest.mark.slow
def test_summary_and_exit_code_when_a_point_fails(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky.py").write_text("def reward(args, sample, **kwargs):\n    raise RuntimeError('reward server down')\n")
    res = run_py("-m", "args.custom_rm_path=trainstack.tiny.arithmetic.reward,flaky.reward", *FAST,
                 f"runtime_env.pythonpath=[{plugins}]", "hydra.sweep.dir=sw", cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    summary = res.stderr[res.stderr.index("sweep summary"):]
    rows = [ln.split() for ln in summary.splitlines()[2:4]]
    assert rows[0][:3] == ["0", "ok", "0"] and rows[1][:2] == ["1", "failed"] and rows[1][2] != "0"
    assert float(rows[0][3]) >= 0  # final reward of the point that trained
    assert "2 points: 1 ok, 1 failed" in summary
