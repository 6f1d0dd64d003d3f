"""`pip install .` (not editable) from a clone gives working `trainstack` and `trainstack run`
commands from any directory, with conf/ shipped as package data and a user's own config dir. The
wheel holds only our three top-level packages (no generic `plugins`, no fakes or test support), and
the old name of the renamed slime plugin package gets the new one, not an ImportError on the node."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import run_py
from test_run_spec import copy_project
from trainstack.errors import ConfigErrors
from trainstack.pipeline import build_from_overrides
from trainstack.plugin_paths import locate

ROOT = Path(__file__).resolve().parents[1]
OLD_GENERATE = "plugins.http_env.generate.generate"
NEW_GENERATE = "trainstack_plugins.http_env.generate.generate"


def _setuptools_builds_wheels_offline() -> bool:
    """setuptools >= 70.1 has bdist_wheel built in; older ones need the `wheel` package."""
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """`pip wheel --no-deps` of a copy of this checkout (tests/, devtools/ and all: what must stay
    out has to be there to be left out); offline when this interpreter's setuptools can build one."""
    tmp = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    src = tmp / "src"
    for rel in files:
        if (ROOT / rel).is_file() or (ROOT / rel).is_symlink():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel, follow_symlinks=False)  # trainstack/conf stays a link to conf/
    assert (src / "devtools" / "trainstack_dev" / "fakes" / "hub.py").is_file()
    offline = ["--no-build-isolation"] if _setuptools_builds_wheels_offline() else []
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *offline, "-w", str(tmp / "dist"),
                          str(src)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("trainstack-*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_installs_only_our_top_level_packages(wheel):
    names = wheel.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"trainstack", "trainstack_plugins", "hydra_plugins"}, top
    top_level_txt = next((n for n in names if n.endswith(".dist-info/top_level.txt")), None)
    if top_level_txt:
        assert set(wheel.read(top_level_txt).decode().split()) <= top
    assert "trainstack_plugins/http_env/generate.py" in names
    assert "hydra_plugins/trainstack_launchers/launcher.py" in names


def test_wheel_ships_no_fakes_or_test_support(wheel):
    modules = [n for n in wheel.namelist() if n.endswith(".py")]
    leaked = [n for n in modules if {"fakes", "tests", "devtools", "trainstack_dev"} & set(n.split("/"))
              or Path(n).stem in ("oracle", "conftest") or n.startswith("plugins/")]
    assert leaked == [], leaked
    assert len(modules) > 50  # the package itself is there


def test_wheel_ships_conf_yaml(wheel):
    names = set(wheel.namelist())
    repo_conf = sorted(p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml"))
    assert len(repo_conf) > 40
    missing = [c for c in repo_conf if f"trainstack/conf/{c}" not in names]
    assert missing == [], missing
    assert "trainstack/data/slime_models.json" in names


def test_old_plugin_name_is_refused_with_the_new_one(in_tmp):
    with pytest.raises(ConfigErrors) as e:
        build_from_overrides(["experiment=cpu-agentic", f"env.custom_generate_function_path={OLD_GENERATE}"])
    (err,) = [x for x in e.value.errors if OLD_GENERATE in x.problem]
    assert err.key.endswith("custom_generate_function_path") and err.value == OLD_GENERATE
    assert "trainstack_plugins.http_env" in err.problem and err.fix == f"write {NEW_GENERATE}"
    # the user's command: one message naming the key and the fix, exit 2, nothing launched, no traceback
    res = run_py("experiment=cpu-agentic", f"env.custom_generate_function_path={OLD_GENERATE}", cwd=in_tmp)
    assert res.returncode == 2, res.stderr[-2000:]
    assert NEW_GENERATE in res.stderr and "Traceback" not in res.stderr
    assert not (in_tmp / "runs").exists()
    # the new name is found where the trainer looks, without importing it
    assert locate(NEW_GENERATE, [str(ROOT / "plugins")]) == ""
    assert locate(OLD_GENERATE, [str(ROOT / "plugins")]) == f"renamed: use {NEW_GENERATE!r}"


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
                                    "  - override /cluster: lium_8xh100\nname: mine\nalgo:\n  lr: 3.0e-6\n"
                                    "cluster:\n  lium:\n    pod:\n      image: me/trainstack-slime:1\n")
    r = subprocess.run([ts, "run", "--config-dir", str(tmp_path / "my_conf"), "experiment=mine", "dry_run=true"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # a remote launcher: the checkout is looked for where the run was composed, and its check is deferred
    assert "--lr 3e-06" in r.stdout and f"slime checkout: {elsewhere}/slime (train.py NOT present" in r.stdout, \
        r.stdout[-2000:]
    assert not (elsewhere / "runs").exists()
