"""A run id is bound to its launcher and its history (trainstack/run/binding.py): a run dir stored by one
launcher is refused to another (a Lium pod or a SLURM job would overwrite its spec and train from zero),
a different training config under the same run id is refused even before any checkpoint exists, and
each refusal names the fix. Only the run length may change freely."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_py
from trainstack.run.binding import binding_errors
from trainstack.run.rundir import RunDir
from trainstack.config.schema import ResumeSpec


def stored_run(tmp_path: Path, *overrides: str) -> Path:
    """A run dir as a launch stores it (spec.json and its views), no checkpoint: a submitted run."""
    from trainstack.api import Run

    run = Run.compose([f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=bound",
                       *overrides])
    spec = run.spec()
    RunDir(spec.run_dir).write_spec(spec)
    return Path(spec.run_dir)


LIUM_IMAGE = "cluster.lium.pod.image=me/trainstack-slime:1"


def dry(tmp_path: Path, *overrides: str):
    return run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=bound", *overrides,
                  "dry_run=true", cwd=tmp_path, env={"COLUMNS": "200"})


def test_a_local_run_is_refused_to_lium_and_slurm_with_the_fix(tmp_path):
    run_dir = stored_run(tmp_path)
    before = (run_dir / "spec.json").read_text()
    for other in (["cluster=lium_cpu", LIUM_IMAGE], ["cluster.launcher=slurm"]):
        res = dry(tmp_path, *other, "env.num_rollout=6")
        assert res.returncode == 2, res.stdout + res.stderr
        assert "error: cluster.launcher: run bound belongs to the 'local' launcher" in res.stderr
        assert "would train it again from zero" in res.stderr
        assert "run_id=<new id>" in res.stderr and "resume.allow_changes=[launcher]" in res.stderr
    assert (run_dir / "spec.json").read_text() == before  # nothing overwritten
    ok = dry(tmp_path, "cluster=lium_cpu", LIUM_IMAGE, "resume.allow_changes=[launcher]")  # moved knowingly
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1] == "ok: ready to launch bound on lium"


def test_a_lium_sweep_reusing_a_local_run_id_is_refused_before_anything_is_registered(tmp_path):
    stored_run(tmp_path)
    res = run_py("-m", "hydra/launcher=lium", "cluster=lium_cpu", LIUM_IMAGE, f"paths.runs_root={tmp_path}/runs",
                 f"paths.data_root={tmp_path}/data", "run_id=bound", "algo.lr=1e-3", "env.num_rollout=6",
                 "dry_run=true", f"hydra.sweep.dir={tmp_path}/sw", cwd=tmp_path, env={"COLUMNS": "200"})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "belongs to the 'local' launcher" in res.stderr


def test_launchers_that_share_this_run_dir_may_take_it_over(tmp_path):
    stored_run(tmp_path)  # local; ray_job on a loopback head trains here, in the same run dir
    res = dry(tmp_path, "cluster.launcher=ray_job", "cluster.ray_job.start_head=true")
    assert res.returncode == 0, res.stderr


def test_another_training_config_under_the_same_run_id_is_refused_without_checkpoints(tmp_path):
    stored_run(tmp_path)
    res = dry(tmp_path, "algo.lr=5e-3")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: run_id: run bound was submitted with another training config" in res.stderr
    assert "lr = '0.001 -> 0.005'" in res.stderr and "resume.allow_changes=[lr]" in res.stderr
    assert dry(tmp_path, "algo.lr=5e-3", "resume.allow_changes=[lr]").returncode == 0
    assert dry(tmp_path, "env.num_rollout=5000").returncode == 0  # the run length changes freely


class _Run:
    def __init__(self, launcher: str, args: dict, allow: list[str] | None = None):
        self.run_id, self.run_dir, self.launcher, self.args = "r", "/runs/r", launcher, args
        self.resume = ResumeSpec(allow_changes=allow or [])


DESTS = st.sampled_from(["lr", "entropy_coef", "n_samples_per_prompt", "eps_clip", "kl_coef"])
VALUES = st.one_of(st.integers(0, 5), st.floats(0, 1, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(old=st.dictionaries(DESTS, VALUES, min_size=1), new=st.dictionaries(DESTS, VALUES),
       old_len=st.integers(1, 1000), new_len=st.integers(1, 1000),
       launchers=st.tuples(st.sampled_from(["local", "slurm", "lium"]), st.sampled_from(["local", "slurm", "lium"])))
def test_binding_refuses_exactly_launcher_moves_and_config_changes(old, new, old_len, new_len, launchers):
    """Over the class: refused iff the launcher moves off this host or a training dest differs; the run
    length never counts; every refused key is named and allowing it accepts."""
    stored = {"launcher": launchers[0], "args": {**old, "num_rollout": old_len}, "cluster": {"settings": {}}}
    run = _Run(launchers[1], {**new, "num_rollout": new_len})
    errors = binding_errors(run, stored)
    moved = launchers[0] != launchers[1] and not (launchers[0] == launchers[1] == "local")
    changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
    assert [e.key for e in errors] == (["cluster.launcher"] if moved else []) + (["run_id"] if changed else [])
    if changed:
        assert set(errors[-1].related) == changed
    allow = (["launcher"] if moved else []) + sorted(changed)
    assert binding_errors(_Run(launchers[1], run.args, allow), stored) == []


@pytest.mark.parametrize("stored", [None, [], "x", {}])
def test_no_stored_spec_binds_nothing(stored):
    assert binding_errors(_Run("lium", {"lr": 1}), stored) == []
