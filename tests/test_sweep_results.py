"""What every trainstack Hydra launcher answers for each sweep point (trainstack/run/result.py): a JobReturn with
the point's config and Hydra config, the run's real status, and a typed result whose objective Optuna optimises.

`trainstack_local` runs Hydra task functions and passes Hydra's own suites (tests/test_hydra_suites.py).
`hydra/launcher=local|ray_job|slurm|lium` submit trainstack runs by design; the conventions they keep and
the ones they do not are stated here, one assertion each (docs/launchers.md, "What a sweep point returns")."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SMALL_BATCH

from trainstack.run import result as sr
from trainstack.errors import ConfigErrors

SUBMITTING = ["local", "ray_job", "slurm", "lium"]  # hydra/launcher=<trainstack launcher>: the shared plugin


# -- the objective -------------------------------------------------------------------------------------------
def test_objective_names_a_metric_and_which_value_counts():
    points = [(0.0, 0.2), (1.0, 0.9), (2.0, 0.5)]
    assert sr.Objective.parse(None) == sr.Objective("rollout/raw_reward", "last")
    assert sr.Objective.parse("eval/arithmetic").pick(points) == 0.5
    assert sr.Objective.parse("eval/arithmetic:max").pick(points) == 0.9
    assert sr.Objective.parse("train/loss:min").pick(points) == 0.2
    assert sr.Objective.parse("x:best").pick(points) == 0.9  # maximize unless the sweeper minimizes
    assert sr.Objective.parse("x:best").pick(points, "minimize") == 0.2
    assert sr.Objective.parse("x:best").pick(points, ["minimize"]) == 0.2
    assert sr.Objective.parse("x").pick([]) is None
    with pytest.raises(ConfigErrors) as err:
        sr.Objective.parse("eval arithmetic")
    assert err.value.errors[0].key == "objective" and "names no metric" in err.value.errors[0].problem


metric_names = st.text(st.characters(blacklist_categories=("Zs", "Cc"), blacklist_characters=":"), min_size=1,
                       max_size=30).filter(lambda s: s.strip() == s and not any(c.isspace() for c in s))


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=40), st.integers(), st.floats(), st.booleans(), st.lists(st.text())))
def test_any_objective_is_parsed_or_refused_with_one_message(value):
    """The class of bad objectives: anything a config can hold is an Objective or ConfigErrors naming the key."""
    try:
        obj = sr.Objective.parse(value)
    except ConfigErrors as err:
        assert [e.key for e in err.errors] == ["objective"] and err.errors[0].fix
        return
    assert obj.take in sr.TAKES and obj.metric.strip()


@settings(max_examples=100, deadline=None)
@given(metric_names, st.sampled_from(sr.TAKES), st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8))
def test_an_objective_round_trips_and_picks_a_value_of_its_series(metric, take, values):
    obj = sr.Objective(metric, take)
    assert sr.Objective.parse(str(obj)) == obj
    got = obj.pick([(float(i), v) for i, v in enumerate(values)])
    assert (got is None) == (not values) and (got is None or got in values)


def test_a_result_is_a_number_for_optuna_and_says_why_when_it_has_none():
    done = sr.RunResult(num=0, run_id="r", run_dir="/x", state=sr.FINISHED, value=0.75)
    assert float(done) == 0.75 and "r (finished): rollout/raw_reward = 0.75" in str(done)
    for state, why in ((sr.SUBMITTED, "add hydra.launcher.wait=true"), (sr.CHECKED, "a dry run trains nothing"),
                       (sr.FINISHED, "the run logged none")):
        with pytest.raises(ValueError, match=why):
            float(sr.RunResult(num=1, run_id="r", run_dir="/x", state=state))
    failed = sr.RunFailed(sr.RunResult(num=3, run_id="r", run_dir="/runs/r", state=sr.FAILED, code=1))
    from hydra.errors import CompactHydraException

    assert isinstance(failed, CompactHydraException)  # Hydra prints it whole, no traceback, and exits 1
    assert "sweep point 3 failed: run r exited with 1" in str(failed) and "/runs/r/logs/trainer.log" in str(failed)


def test_hydra_sweeper_objective_is_one_spelling_for_every_sweeper():
    assert sr.objective_alias(["-m", "hydra.sweeper.objective=eval/arithmetic:best", "algo.lr=1"]) == [
        "-m", "objective=eval/arithmetic:best", "algo.lr=1"]


def test_every_launcher_that_can_return_before_its_run_ends_has_a_typed_wait():
    """SLURM, Lium and Ray jobs can submit and return; each has `wait` (a bool setting) that makes it wait."""
    import dataclasses

    from trainstack import registry

    can_return = []
    for name in registry.names():
        cls = registry.launcher_class(name)
        if cls.waits_with({"wait": False}):
            continue  # runs to the end whatever it is told (local)
        can_return.append(name)
        fields = {f.name: f for f in dataclasses.fields(cls.Settings)}
        assert fields["wait"].type in (bool, "bool") and cls.waits_with({"wait": True}), name
    assert {"ray_job", "slurm", "lium"} <= set(can_return)


# -- a Hydra app that is not trainstack's ----------------------------------------------------------------------
@pytest.mark.parametrize("launcher", SUBMITTING)
def test_a_submitting_launcher_refuses_another_apps_config_with_one_message(launcher, hydra_sweep_runner, tmp_path,
                                                                            capsys):
    """Hydra's suites' first test, sweep_1_job, on each launcher that submits trainstack runs: exit 2, no traceback
    (it was `Missing key cluster`)."""
    with pytest.raises(SystemExit) as ex:
        with hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module", task_function=None,
                                config_path="configs", config_name="compose.yaml",
                                overrides=[f"hydra/launcher={launcher}"], temp_dir=tmp_path / "sw"):
            pass
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("error: ") == 1 and "Traceback" not in err, err
    assert f"the '{launcher}' launcher submits trainstack runs" in err and "hydra/launcher=trainstack_local" in err
    assert not (tmp_path / "sw" / "0").exists()


# -- trainstack's config: the conventions the submitting launchers keep, and the ones they do not ----------------
def sweep(hydra_sweep_runner, tmp_path, *overrides: str, task=None):
    from trainstack.config.overrides import normalise_argv
    from trainstack.config.resolve import CONF_DIR

    return hydra_sweep_runner(calling_file=str(ROOT / "run.py"), calling_module=None, task_function=task,
                              config_path="conf", config_name="config",
                              overrides=normalise_argv([*overrides, f"paths.runs_root={tmp_path}/runs",
                                                        "hydra.mode=MULTIRUN"], str(CONF_DIR)),  # as `-m` sets it
                              temp_dir=tmp_path / "sw")


REMOTE_RAY = "cluster.ray_job.address=http://10.255.255.1:8265"  # a cluster the launch reaches, not this dry run
DRY = {"local": ["dry_run=true"], "ray_job": ["dry_run=true", REMOTE_RAY],
       "slurm": ["hydra.launcher.dry=true", "cluster=slurm_8xh100", "model=qwen3-4B"],
       "lium": ["dry_run=true", "cluster=lium_cpu", "cluster.lium.pod.image=you/trainstack-slime:0.1"]}


@pytest.mark.parametrize("launcher", SUBMITTING)
def test_what_a_submitting_launcher_returns_for_each_point(launcher, hydra_sweep_runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    called: list = []
    with sweep(hydra_sweep_runner, tmp_path, f"hydra/launcher={launcher}", "algo.lr=1e-3,2e-3", *DRY[launcher],
               task=called.append) as s:  # (the runner removes the sweep dir when the block ends)
        returns = s.returns[0]
        multirun_yaml = (tmp_path / "sw" / "multirun.yaml").is_file()
        hydra_dirs = list((tmp_path / "sw").rglob(".hydra"))
    # kept: one JobReturn per point, in order, with its overrides, its task config (no `hydra` node) and its
    # Hydra config (job name, id and num as Hydra's launchers set them), and the job dir of <sweep.dir>/<subdir>
    assert len(returns) == 2
    for num, (ret, lr) in enumerate(zip(returns, (1e-3, 2e-3))):
        assert f"++algo.lr={lr}" in ret.overrides
        assert ret.cfg.algo.lr == lr and "hydra" not in ret.cfg and ret.cfg.cluster.launcher
        assert ret.hydra_cfg.hydra.job.num == num and str(ret.hydra_cfg.hydra.job.id) == str(num)
        assert ret.task_name == ret.hydra_cfg.hydra.job.name == "run"
        assert Path(ret.working_dir) == tmp_path / "sw" / str(num)
        # kept: the status is the run's; the return value is its typed result (a dry run: CHECKED, no value)
        assert ret.status.name == "COMPLETED" and isinstance(ret.return_value, sr.RunResult)
        assert ret.return_value.state == sr.CHECKED and ret.return_value.num == num
        with pytest.raises(ValueError, match="dry run"):
            float(ret.return_value)
    # a dry run (dry_run=true) leaves nothing behind (docs/validation.md), multirun.yaml included; SLURM's
    # hydra.launcher.dry=true writes the sweep's sbatch scripts and sweep.json for `trainstack status`, and keeps it
    assert multirun_yaml == (launcher == "slurm")
    # not kept: the task function is not called (a point is a stored run spec, executed where its cluster says)
    assert called == []
    # not kept (as trainstack_local: conf/config.yaml sets hydra.output_subdir=null): no `.hydra/` per point
    assert hydra_dirs == []


def test_a_sequential_sweeper_is_refused_once_before_anything_is_launched(hydra_sweep_runner, tmp_path, monkeypatch,
                                                                         capsys):
    """Optuna needs each point's result: a launcher that returns before its runs end is refused naming
    hydra.launcher.wait (a key that launcher has), a dry run naming dry_run."""
    monkeypatch.chdir(tmp_path)
    for overrides, key in ((["hydra/launcher=ray_job", "hydra.launcher.wait=false", REMOTE_RAY], "hydra.launcher.wait"),
                           (["hydra/launcher=local", "dry_run=true"], "dry_run"),
                           (["dry_run=true"], "dry_run")):
        with pytest.raises(SystemExit) as ex:
            with sweep(hydra_sweep_runner, tmp_path, *overrides, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                       "algo.lr=interval(0.0005,0.005)"):
                pass
        err = capsys.readouterr().err
        assert ex.value.code == 2 and err.count("error: ") == 1 and f"error: {key}: the OptunaSweeper" in err, err
        assert not (tmp_path / "runs").exists() and not (tmp_path / "sw").exists()


# -- real runs on `hydra/launcher=local`: results, failures ----------------------------------------------------
@pytest.mark.slow
def test_a_local_launcher_sweep_returns_each_runs_result_and_its_failure(hydra_sweep_runner, tmp_path, monkeypatch):
    """Two tiny runs, one whose reward function raises: the first point is COMPLETED with the run's final reward
    as its number; the second is FAILED (it was COMPLETED, and the sweep exited 0), and the sweep raises its
    RunFailed, which Hydra reports as one message with exit 1."""
    from hydra.core.plugins import Plugins

    monkeypatch.chdir(tmp_path)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky.py").write_text("async def reward(args, sample, **kwargs):\n    raise RuntimeError('down')\n")
    seen: list = []  # what the launcher answers the sweeper (Hydra's plugin scan reloads the launcher's module:
    instantiate = Plugins.instantiate_launcher  # its instance is wrapped, not its class)

    def recording(self, *a, **k):
        launcher = instantiate(self, *a, **k)
        launch = launcher.launch
        launcher.launch = lambda *la, **lk: seen.append(launch(*la, **lk)) or seen[-1]
        return launcher

    monkeypatch.setattr(Plugins, "instantiate_launcher", recording)
    with pytest.raises(sr.RunFailed) as failed:
        with sweep(hydra_sweep_runner, tmp_path, "hydra/launcher=local", "env.num_rollout=1", *SMALL_BATCH,
                   "args.eval_interval=null", f"runtime_env.pythonpath=[{plugins}]", "hydra.output_subdir=.hydra",
                   "args.custom_rm_path=trainstack.tiny.arithmetic.reward,flaky.reward"):
            pass
    ok, bad = seen[0]
    assert ok.status.name == "COMPLETED" and ok.return_value.state == sr.FINISHED and ok.return_value.code == 0
    from trainstack.run.rundir import RunDir

    rewards = RunDir(ok.return_value.run_dir).last_metrics()[1]
    assert float(ok.return_value) == rewards[-1] and math.isfinite(rewards[-1])
    assert ok.return_value.metrics["rollout/raw_reward"] == rewards[-1]
    assert bad.status.name == "FAILED" and bad.cfg.args.custom_rm_path == "flaky.reward"
    with pytest.raises(sr.RunFailed):
        bad.return_value
    assert failed.value.result.run_id == bad._return_value.result.run_id and failed.value.result.code == 1
    for ret in (ok, bad):  # hydra.output_subdir set: each launched point's job dir has Hydra's three files
        from omegaconf import OmegaConf

        job = Path(ret.working_dir) / ".hydra"
        assert OmegaConf.load(job / "config.yaml").args.custom_rm_path == ret.cfg.args.custom_rm_path and (job / "hydra.yaml").is_file()
        assert list(OmegaConf.load(job / "overrides.yaml")) == list(ret.overrides)


@pytest.mark.slow
def test_optuna_optimises_the_run_result_under_the_default_launcher(hydra_sweep_runner, tmp_path, monkeypatch):
    """Under trainstack_local every trial used to fail ("Return value must be float-castable", then "No trials
    are completed yet") after its run trained: the task returned a PointResult. Now its float is the objective."""
    import yaml

    from trainstack.cli.app import run_app

    monkeypatch.chdir(tmp_path)
    with sweep(hydra_sweep_runner, tmp_path, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
               "hydra.sweeper.direction=maximize", "objective=rollout/raw_reward:max", "env.num_rollout=2",
               *SMALL_BATCH, "args.eval_interval=null", "algo.lr=interval(0.0005,0.005)", task=run_app):
        best = yaml.safe_load((tmp_path / "sw" / "optimization_results.yaml").read_text())["best_value"]
        from trainstack.metrics import read_local

        bests = [max(v for _, v in read_local(d, "jsonl").series["rollout/raw_reward"])
                 for d in (tmp_path / "runs").iterdir()]
    assert len(bests) == 2 and best == max(bests)
