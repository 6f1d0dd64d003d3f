"""trainstack/config/hydra_entry.py against Hydra itself: a single run composed once gives the task what
`@hydra.main` gives it (the config and `HydraConfig`), and anything else is left to `@hydra.main`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from trainstack.config.hydra_entry import plain_overrides, register_launchers, run_single
from trainstack.config.resolve import CONF_DIR, PRIMARY_CONFIG

SEEN: list[dict] = []


def task(cfg):  # what a task can read: its config and HydraConfig
    from hydra.core.hydra_config import HydraConfig

    hc = OmegaConf.to_container(HydraConfig.get(), resolve=False)
    hc["runtime"].pop("output_dir", None)  # Hydra's run_job sets it; a dry run makes no output dir
    SEEN.append({"cfg": {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
                         for k in cfg if k != "hydra"},  # a dry run's task gets the hydra node too; resolve skips it
                 "hydra": hc})


def through_hydra_main(argv: list[str], conf: str) -> dict:
    import hydra

    SEEN.clear()
    old = sys.argv
    sys.argv = ["app.py", *argv]
    try:
        hydra.main(config_path=conf, config_name=PRIMARY_CONFIG, version_base="1.3")(task)()
    finally:
        sys.argv = old
    return SEEN[-1]


def through_run_single(argv: list[str], conf: str) -> dict:
    SEEN.clear()
    assert run_single(task, conf, PRIMARY_CONFIG, argv, version_base="1.3")
    return SEEN[-1]


@pytest.mark.parametrize("argv", [
    ["dry_run=true"],
    ["dry_run=true", "experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "algo.lr=2e-6"],
    ["dry_run=false", "++args.seed=3"],  # not dry: through Hydra's run_job (hydra.run.dir is `.`, nothing saved)
])
def test_a_single_run_sees_what_hydra_main_gives(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    register_launchers()
    ours = through_run_single(argv, str(CONF_DIR))
    theirs = through_hydra_main(argv, str(CONF_DIR))
    assert ours == theirs
    assert "hydra.mode=RUN" in ours["hydra"]["overrides"]["hydra"] and ours["hydra"]["mode"].name == "RUN"
    assert list(tmp_path.iterdir()) == []  # nothing written by either


def test_what_only_hydra_main_decides_is_left_to_it(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("a: 1\nhydra:\n  mode: MULTIRUN\n")
    assert not run_single(task, str(conf), "config", ["a=2"], version_base="1.3")  # the tree asks for a multirun
    (conf / "config.yaml").write_text("a: 1\n")
    assert not run_single(task, str(conf), "config", ["a=1,2"], version_base="1.3")  # a sweep without -m: Hydra's error
    assert not run_single(task, str(conf), "config", ["nope=1"], version_base="1.3")  # composition error: Hydra reports
    for argv in (["-m", "a=1,2"], ["--cfg", "job"], ["--config-dir", str(conf)], ["hydra.mode=MULTIRUN"], ["--help"]):
        assert not plain_overrides(argv), argv
    from hydra.core.global_hydra import GlobalHydra

    assert not GlobalHydra.instance().is_initialized()  # each refusal left Hydra as it found it


def test_the_plugin_scan_imports_nothing_of_trainstack(tmp_path):
    """Any Hydra app in this venv: Hydra's scan of `hydra_plugins` imports no trainstack module and reads
    no entry points (trainstack registers its launcher options itself)."""
    import subprocess

    code = ("import sys\nfrom hydra.core.plugins import Plugins\nPlugins.instance()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trainstack', 'importlib_metadata')"
            " or m == 'importlib.metadata'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    plugins = Path(__file__).resolve().parents[1] / "plugins" / "hydra_plugins"
    assert (plugins / "trainstack_launchers" / "launcher.py").exists()
