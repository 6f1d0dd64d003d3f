"""The plugins' verdict comes from the trainer's interpreter with the trainer's environment
(trainstack/preflight/plugin_probe.py): a plugin on the user's shell PYTHONPATH only is refused with the fix,
slime's own plugin modules import on the CPU backend, slime's call contract is checked, and the dry
run and the launch give the same verdict for every signature, location and backend."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, files_under, run_py
from tests.fakes import fake_gpu_host
from trainstack.preflight import plugin_probe
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.preflight.checks import preflight

QWEN = ["experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true"]
GOOD = "async def reward(args, sample, **kwargs):\n    return 1.0\n"
SIGNATURES = {  # source -> refused?
    GOOD: False,
    "def reward(args, sample, **kwargs):\n    return 1.0\n": True,  # slime awaits it
    "async def reward(args):\n    return 1.0\n": True,  # slime passes (args, sample)
    "async def reward(args, samples):\n    return [1.0]\n": True,  # a per-group reward, without group_rm
}


def verdict(overrides: list[str], where: Path, launching: bool = False) -> list[tuple[str, str]]:
    """(key, problem) of every preflight error, composed in `where`, with no verdict kept from before."""
    plugin_probe._MEMO.clear()
    old = os.getcwd()
    os.chdir(where)
    try:
        run, cmd = build_from_overrides(overrides)
        try:
            preflight(run, cmd, launching=launching)
            return []
        except ConfigErrors as err:
            return sorted((e.key, e.problem) for e in err.errors)
    finally:
        os.chdir(old)


@pytest.fixture(autouse=True)
def no_kept_verdicts(monkeypatch):
    monkeypatch.setenv(plugin_probe.CACHE_ENV, "0")


def _plugin(where: Path, source: str = GOOD) -> Path:
    d = where / "plug"
    d.mkdir(exist_ok=True)
    (d / "my_rm.py").write_text(source)
    return d


def test_a_plugin_on_the_shells_pythonpath_only_is_refused_with_the_fix(tmp_path, monkeypatch):
    plug = _plugin(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{plug}")
    errors = verdict(["args.custom_rm_path=my_rm.reward"], tmp_path)
    assert [k for k, _ in errors] == ["args.custom_rm_path"]
    assert f"it is in {plug}, on your shell's PYTHONPATH" in errors[0][1]
    assert verdict(["args.custom_rm_path=my_rm.reward", f"runtime_env.pythonpath=[{plug}]"], tmp_path) == []


def test_the_shells_pythonpath_case_is_refused_by_the_dry_run_and_the_launch_alike(tmp_path):
    plug = _plugin(tmp_path)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{plug}"}
    dry = run_py("args.custom_rm_path=my_rm.reward", "dry_run=true", cwd=tmp_path, env=env)
    launch = run_py("args.custom_rm_path=my_rm.reward", cwd=tmp_path, env=env)
    assert dry.returncode == launch.returncode == 2, (dry.stderr[-600:], launch.stderr[-600:])
    fix = f"fix   : add the directory to the run: runtime_env.pythonpath=[{plug}]"
    assert fix in dry.stderr and fix in launch.stderr
    assert "Traceback" not in dry.stderr + launch.stderr
    assert files_under(tmp_path) == ["plug", "plug/my_rm.py"]


def test_slimes_own_plugins_import_on_the_cpu_backend(tmp_path):
    """algo=dapo names slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std."""
    assert verdict(["algo=dapo"], tmp_path) == []


def test_group_rm_with_a_single_sample_reward_is_refused(tmp_path):
    errors = verdict(["args.group_rm=true", "env.eval_interval=null"], tmp_path)  # the arithmetic reward: (args, sample)
    assert [k for k, _ in errors] == ["env.custom_rm_path"]
    assert "names its second parameter 'sample', but slime passes one group of samples" in errors[0][1]


def test_a_plugin_that_needs_a_missing_package_names_it(tmp_path):
    plug = _plugin(tmp_path, "import no_such_dependency\n\n" + GOOD)
    errors = verdict(["args.custom_rm_path=my_rm.reward", f"runtime_env.pythonpath=[{plug}]"], tmp_path)
    assert "ModuleNotFoundError: No module named 'no_such_dependency'" in errors[0][1]
    assert f"{plug}/my_rm.py:1" in errors[0][1]


def test_a_kept_verdict_holds_until_the_plugin_changes(tmp_path, monkeypatch):
    monkeypatch.setenv(plugin_probe.CACHE_ENV, str(tmp_path / "cache"))
    plug = _plugin(tmp_path)
    overrides = ["args.custom_rm_path=my_rm.reward", f"runtime_env.pythonpath=[{plug}]"]
    assert verdict(overrides, tmp_path) == []
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    (plug / "my_rm.py").write_text("def reward(args, sample):\n    return 1.0\n")  # now sync: refused
    assert "slime awaits it" in verdict(overrides, tmp_path)[0][1]


# dry run == launch, over signatures x locations x backends ------------------------------------------
LOCATIONS = ("shell", "runtime_env", "installed", "slime")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(sorted(SIGNATURES)), where=st.sampled_from(LOCATIONS),
       backend=st.sampled_from(["tiny", "slime"]))
def test_dry_run_and_launch_give_the_same_verdict(tmp_path_factory, monkeypatch, source, where, backend):
    tmp = tmp_path_factory.mktemp("probe")
    plug = _plugin(tmp, source)
    overrides = [] if backend == "tiny" else list(QWEN)
    if where == "slime":
        overrides.append("algo.dynamic_sampling_filter_path="
                         "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std")
        refused = False
    elif where == "installed":  # trainstack's own reward, from the package the trainer's interpreter has
        overrides.append("args.custom_rm_path=trainstack.tiny.arithmetic.reward")
        refused = False
    else:
        overrides.append("args.custom_rm_path=my_rm.reward")
        refused = where == "shell" or SIGNATURES[source]
    if where == "shell":
        monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{plug}")
    else:
        monkeypatch.setenv("PYTHONPATH", str(ROOT))
        overrides.append(f"runtime_env.pythonpath=[{plug}]")
    if backend == "slime":
        fake_gpu_host(tmp, overrides)
        overrides += [f"slime.root={tmp}/slime"]
    dry = verdict(overrides, tmp)
    launch = verdict(overrides, tmp, launching=True)
    assert dry == launch
    plugin_errors = [e for e in dry if e[0].endswith("_path")]
    assert bool(plugin_errors) == refused, (where, backend, source, dry)


def test_a_sweep_asks_the_interpreter_once(tmp_path, monkeypatch):
    """Points that differ in training values (and so in run id, TENSORBOARD_DIR) share one probe."""
    asked = []
    real = plugin_probe._ask
    monkeypatch.setattr(plugin_probe, "_ask", lambda probe: asked.append(probe) or real(probe))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        plugin_probe._MEMO.clear()
        for seed in range(4):
            run, cmd = build_from_overrides([f"args.seed={seed}", f"algo.lr={seed + 1}e-3"])
            preflight(run, cmd, launching=False)
    finally:
        os.chdir(old)
    assert len(asked) == 1


def test_trainstack_exec_asks_the_trainers_host(tmp_path):
    """A remote launcher defers the probe; the host that executes the stored run asks its own interpreter."""
    from trainstack.preflight.checks import check_stored
    from trainstack.run.spec import RunSpec

    overrides = [*QWEN, "cluster=slurm_8xh100", "args.custom_rm_path=trainstack.tiny.arithmetic.score"]
    fake_gpu_host(tmp_path, overrides)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run, cmd = build_from_overrides(overrides)
        report = preflight(run, cmd, launching=False)
    finally:
        os.chdir(old)
    assert "args.custom_rm_path: trainstack.tiny.arithmetic.score imports in the trainer's interpreter and fits " \
           "slime's call" in report.deferred
    plugin_probe._MEMO.clear()
    with pytest.raises(ConfigErrors) as err:
        check_stored(RunSpec.from_run(run, cmd))
    assert [e.key for e in err.value.errors] == ["args.custom_rm_path"]
    assert "slime awaits it" in err.value.errors[0].problem


def test_a_plugin_fixed_in_the_same_process_passes_at_once(tmp_path):
    """The API's dry_run again after fixing the file: a refusal is never kept, a pass only while its files hold."""
    plug = _plugin(tmp_path, "def reward(args, sample):\n    return 1.0\n")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        plugin_probe._MEMO.clear()
        run, cmd = build_from_overrides(["args.custom_rm_path=my_rm.reward", f"runtime_env.pythonpath=[{plug}]"])
        with pytest.raises(ConfigErrors):
            preflight(run, cmd, launching=False)
        (plug / "my_rm.py").write_text(GOOD)
        preflight(run, cmd, launching=False)
        (plug / "my_rm.py").write_text("def reward(args, sample):\n    return 0.5\n")  # broken again
        with pytest.raises(ConfigErrors):
            preflight(run, cmd, launching=False)
    finally:
        os.chdir(old)
