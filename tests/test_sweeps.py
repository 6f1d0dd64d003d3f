"""A local sweep as a whole: checked before the first point runs, shared run ids refused, a
summary at the end and a non-zero exit when a point failed, no empty folders from dry runs."""
from __future__ import annotations

import json

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


def test_dry_run_sweep_leaves_nothing_behind(tmp_path):
    """Not its point folders, and not Hydra's multirun.yaml (a dry sweep once left multirun/<date>/)."""
    res = run_py("-m", "algo.lr=1e-3,2e-3", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert files_under(tmp_path) == []
    res = run_py("-m", "algo.lr=1e-3,2e-3", "dry_run=true", "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "sw").exists() and files_under(tmp_path) == []


def test_a_point_whose_plugin_cannot_be_found_stops_the_sweep_first(tmp_path):
    res = run_py("-m", "args.custom_rm_path=trainstack.tiny.arithmetic.reward,trainstack.nope.reward", *FAST,
                 "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 2 and "point 1 [" in res.stderr and "No module named 'trainstack.nope'" in res.stderr
    assert files_under(tmp_path) == []


@pytest.mark.slow
def test_summary_and_exit_code_when_a_point_fails(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky.py").write_text("async def reward(args, sample, **kwargs):\n"
                                      "    raise RuntimeError('reward server down')\n")
    res = run_py("-m", "args.custom_rm_path=trainstack.tiny.arithmetic.reward,flaky.reward", *FAST,
                 f"runtime_env.pythonpath=[{plugins}]", "hydra.sweep.dir=sw", cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    summary = res.stderr[res.stderr.index("sweep summary"):]
    rows = [ln.split() for ln in summary.splitlines()[2:4]]
    assert rows[0][:3] == ["0", "ok", "0"] and rows[1][:2] == ["1", "failed"] and rows[1][2] != "0"
    assert float(rows[0][3]) >= 0  # final reward of the point that trained
    assert "2 points: 1 ok, 1 failed" in summary


@pytest.mark.slow
def test_a_point_that_trained_nothing_says_so_and_shows_no_stale_reward(tmp_path):
    """The README's path: a run finished earlier (the quick start) is a sweep's point too. It trains
    nothing, so its line says `finished earlier at N` and shows no reward: the run's last reward is not
    this sweep's result. The summary fits 80 columns."""
    first = run_py("env.num_rollout=3", *FAST[1:], cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    res = run_py("-m", "algo.lr=1e-3,2e-3", *FAST, "hydra.sweep.dir=sw", cwd=tmp_path, timeout=300,
                 env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr[-2000:]
    summary = res.stderr[res.stderr.index("sweep summary"):]
    assert not [ln for ln in summary.splitlines() if len(ln) > 80], summary
    lines = summary.splitlines()
    point0 = " ".join(lines[2:4])
    assert point0.split()[:4] == ["0", "nothing", "0", "-"], summary
    assert "(finished earlier at 3: nothing trained)" in " ".join(" ".join(lines).split())
    row1 = next(ln for ln in lines if ln.split()[:1] == ["1"])
    assert row1.split()[1] == "ok" and float(row1.split()[3]) >= 0
    assert "2 points: 2 ok (1 finished earlier: nothing trained), 0 failed" in summary


def test_a_slurm_dry_sweep_report_fits_80_columns(tmp_path):
    res = run_py("-m", "hydra/launcher=slurm", "hydra.launcher.dry=true", "experiment=qwen3-4B-grpo-dapo",
                 "cluster=slurm_8xh100", "cluster.num_nodes=1,2", "run_id=qwen3-4B-grpo-dapo-${cluster.num_nodes}n",
                 f"hydra.sweep.dir={tmp_path}/a-sweep-dir-with-a-long-name", cwd=tmp_path, env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = (res.stdout + res.stderr).splitlines()
    assert not [ln for ln in lines if len(ln) > 80], lines
    assert "nothing submitted" in " ".join(ln.strip() for ln in lines)


def test_a_dry_sweep_resolves_hydra_interpolations_per_point_and_writes_outputs_after_every_check(tmp_path):
    """`run_id='s-${hydra:job.num}'` (the shared-run-id fix the sweep suggests) resolves against each point
    while the sweep checks it; `output=` writes each point's command JSON, and only once every point passed."""
    res = run_py("-m", "algo.lr=1e-3,2e-3", "dry_run=true", "run_id=s-${hydra:job.num}", "output=cmd.json",
                 "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("ok ")] == ["s-0", "s-1"]
    assert files_under(tmp_path) == ["cmd.json.0", "cmd.json.1"]
    assert json.loads((tmp_path / "cmd.json.1").read_text())["run_id"] == "s-1"
    bad = run_py("-m", "algo.lr=1e-3,2e-3", "dry_run=true", f"output={tmp_path}/cmd.json.0/cmd.json",  # under a file
                 "hydra.sweep.dir=sw2", cwd=tmp_path)
    assert bad.returncode == 2 and "output" in bad.stderr and "ok " not in bad.stdout, bad.stderr
    assert files_under(tmp_path) == ["cmd.json.0", "cmd.json.1"]


def test_a_dry_point_keeps_only_its_line():
    """What the in-process launcher keeps of a checked dry point until every point is checked: strings,
    never the point's config or run (a dry sweep's memory is flat in its points; benchmarks/sweep_scale.py)."""
    import dataclasses

    from trainstack.sweep.points import DryPoint

    assert {f.name: f.type for f in dataclasses.fields(DryPoint)} == {
        "line": "str", "output": "str | None", "output_json": "str | None",
        "num": "int", "run_id": "str", "run_dir": "str", "overrides": "tuple[str, ...]"}  # its CHECKED answer
