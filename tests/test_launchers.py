"""The launcher interface's own contracts, without a backend: typed settings, the registry, the
Lium sweep metric, the in-process sweep refusal of a launcher that needs the shared plugin."""
from __future__ import annotations

import json
import time

from conftest import ROOT, run_py


def test_every_launcher_owns_typed_settings_and_the_core_cluster_has_none():
    import dataclasses

    from trainstack import registry
    from trainstack.launch.base import Launcher
    from trainstack.config.schema import ClusterSpec

    core = {f.name for f in dataclasses.fields(ClusterSpec)}
    assert not core & {"partition", "account", "time_min", "mem_gb", "cpus_per_node", "ray_address",
                        "start_ray_head", "extra"}
    for name in registry.names():
        cls = registry.launcher_class(name)
        assert issubclass(cls, Launcher) and dataclasses.is_dataclass(cls.Settings)
        for method in ("submit", "execute", "status", "cancel", "logs", "record_sweep", "submit_host_problems"):
            assert callable(getattr(cls, method))
    assert {f.name for f in dataclasses.fields(registry.launcher_class("ray_job").Settings)} == {"address", "start_head", "wait"}


def test_a_plugin_launcher_under_the_in_process_sweep_is_refused_once_before_composing(tmp_path):
    """`-m cluster=<slurm cluster>` without hydra/launcher=slurm: one message, not one per point, and no
    point composed (256 points answered as fast as one)."""
    t0 = time.monotonic()
    res = run_py("-m", "cluster=slurm_8xh100", "model=qwen3-4B", "env.num_rollout=range(1,257)", "hydra.sweep.dir=sw",
                 cwd=tmp_path)
    took = time.monotonic() - t0
    assert res.returncode == 2 and res.stderr.count("error: ") == 1, res.stderr
    assert "add hydra/launcher=slurm" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "sw").exists() and not (tmp_path / "runs").exists()
    one = run_py("-m", "cluster=slurm_8xh100", "model=qwen3-4B", "env.num_rollout=1", "hydra.sweep.dir=sw", cwd=tmp_path)
    assert one.returncode == 2 and one.stderr == res.stderr
    assert took < 30, took


def test_status_json_names_each_runs_launcher(tmp_path, capsys, monkeypatch):
    from trainstack.cli.main import main

    for rid, launcher in (("a", "slurm"), ("b", None)):
        d = tmp_path / "runs" / rid
        d.mkdir(parents=True)
        (d / "status.json").write_text(json.dumps({"run_id": rid, "state": "finished",
                                                   **({"launcher": launcher} if launcher else {})}))
    monkeypatch.chdir(tmp_path)
    assert main(["status", "a", "b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["launcher"]) for r in rows] == [("a", "slurm"), ("b", "local")]


def test_old_cluster_keys_name_where_they_moved():
    import pytest

    from trainstack.errors import ConfigErrors
    from trainstack.config.overrides import normalise_argv
    from trainstack.config.resolve import CONF_DIR

    for old, new in (("cluster.partition=gpu", "cluster.slurm.partition"), ("cluster.time_min=60", "cluster.slurm.time_min"),
                     ("cluster.ray_address=http://h:8265", "cluster.ray_job.address"),
                     ("+cluster.extra.launcher.spend_limit=1", "cluster.<launcher>.spend_limit"),
                     ("+cluster.extra.lium.gpu_type=A100", "cluster.lium.pod.gpu_type"),
                     ("+cluster.extra.sbatch.qos=high", "cluster.slurm.sbatch.qos")):
        with pytest.raises(ConfigErrors) as err:
            normalise_argv([old], str(CONF_DIR))
        assert err.value.errors[0].fix == f"use {new}", (old, err.value.errors[0].render())


def test_one_hydra_sweep_plugin_drives_every_launcher():
    """hydra/launcher=<name> for every entry point is the one plugin; backends add no Hydra code.
    trainstack registers the options before it composes (trainstack/config/hydra_entry.py), not the plugin scan."""
    from hydra.core.config_store import ConfigStore

    from hydra_plugins.trainstack_launchers.launcher import TARGET
    from trainstack.config.hydra_entry import register_launchers
    from trainstack import registry

    register_launchers()
    options = ConfigStore.instance().repo["hydra"]["launcher"]
    for name in registry.names():
        node = options[f"{name}.yaml"].node
        assert node["_target_"] == TARGET and node["launcher"] == name and set(node) == {"_target_", "launcher"}
    plugins = sorted(p.name for p in (ROOT / "plugins" / "hydra_plugins").iterdir()
                     if p.is_dir() and not p.name.startswith("__"))
    assert plugins == ["trainstack_launchers", "trainstack_local"], plugins


def test_a_ray_job_that_will_not_stop_is_a_ray_failure_not_bad_input(monkeypatch):
    """A previous job of the run that survives stop_job: RayFailure (exit 7), nothing submitted."""
    import itertools
    from types import SimpleNamespace

    import pytest

    from trainstack.errors import RayFailure
    from trainstack.launch import ray_job

    stopped: list[str] = []
    live = SimpleNamespace(submission_id="trainstack-r-e1", metadata={"trainstack_run_id": "r"},
                           status=SimpleNamespace(value="RUNNING"))
    client = SimpleNamespace(list_jobs=lambda: [live], stop_job=stopped.append)
    runner = object.__new__(ray_job.RayJobRunner)
    runner.client, runner.run_id, runner.grace_s = client, "r", 0.0
    clock = itertools.count(0, 10)
    monkeypatch.setattr(ray_job.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(ray_job.time, "sleep", lambda _s: None)
    with pytest.raises(RayFailure) as err:
        runner._retire_older_jobs()
    assert stopped == ["trainstack-r-e1"] and err.value.exit_code == 7
    assert "do not stop" in err.value.render() and "ray job stop" in err.value.render()


def test_the_hydra_plugin_names_every_launcher_trainstack_ships():
    """The plugin registers the shipped launchers by name at import (no trainstack import, no entry-point read):
    its list is pyproject's `trainstack.launchers` group."""
    import tomllib

    from hydra_plugins.trainstack_launchers.launcher import BUILT_IN

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(BUILT_IN) == sorted(project["entry-points"]["trainstack.launchers"])
