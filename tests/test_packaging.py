"""`pip install .` (not editable) from a clone gives working `trainstack` and `trainstack run`
commands from any directory, with conf/ shipped as package data and a user's own config dir. The
wheel holds only our three top-level packages (no generic `plugins`, no fakes or test support), and
the old name of the renamed slime plugin package gets the new one, not an ImportError on the node."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import run_py
from trainstack.upstream import slime_root
from trainstack.upstream.argtable import load_table
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.rules.plugin_paths import locate

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


# --- installing as a user does (docs/install.md) ---------------------------------------------------------
INSTALL_DOC = ROOT / "docs" / "install.md"


def install_doc_commands() -> list[str]:
    """The pip section's commands of docs/install.md, as a user types them."""
    text = INSTALL_DOC.read_text()
    block = re.search(r"## With pip.*?```bash\n(.*?)```", text, re.S)
    assert block, "docs/install.md has no pip section"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def user_env(home: Path) -> dict[str, str]:
    """A user's shell: its own HOME and PATH; pip's settings and download cache are this machine's (the
    index, torch's local file, wheels already fetched: nothing is downloaded twice)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    real_home = Path(os.path.expanduser("~"))
    base = Path(getattr(sys, "_base_executable", sys.executable)).parent  # the `python3` that made our venv
    env.update(HOME=str(home), PATH=f"{base}:/usr/local/bin:/usr/bin:/bin", XDG_CONFIG_HOME=str(real_home / ".config"),
               XDG_CACHE_HOME=str(real_home / ".cache"), COLUMNS="200", LANG="C.UTF-8")
    return env


@pytest.mark.slow
def test_the_wheel_with_the_cpu_extra_runs_the_install_doc_from_an_empty_directory(wheel, tmp_path):
    """docs/install.md's pip section, run as written in a fresh venv with only the `cpu` extra, from a
    directory outside the checkout, slime cloned as the doc says (from our submodule: no GitHub here)."""
    home = tmp_path / "home"
    home.mkdir()
    cmds = install_doc_commands()
    assert 'pip install "trainstack[cpu]"' in cmds and any(c.startswith("git clone ") for c in cmds)
    script = ["set -euo pipefail"]
    for cmd in cmds:
        line = cmd.replace('pip install "trainstack[cpu]"', f'pip install --no-compile "{wheel.filename}[cpu]"')
        line = line.replace(slime_root.URL, str(ROOT / "slime"))
        script += [f"echo {shlex.quote('@@@ ' + cmd)}", line]
    started = time.monotonic()
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=home, env=user_env(home), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=1200)
    out = r.stdout  # stderr too, in order: each command's output follows its `@@@ command` line
    assert r.returncode == 0, out[-5000:]
    outputs = {cmd: rest for cmd, _, rest in (p.partition("\n") for p in ("\n" + out).split("\n@@@ ")[1:])}
    runs = [c for c in cmds if c.startswith("trainstack run") and "dry_run" not in c]
    assert "ok: ready to launch" in outputs[next(c for c in cmds if "dry_run=true" in c)]
    assert len(runs) == 2 and all("(finished, exit code 0)" in outputs.get(c, "") for c in runs), out[-5000:]
    assert "rollout 2/2" in outputs[runs[0]] and "cpu-agentic-" in outputs[runs[1]]
    assert "tiny-grpo-arithmetic-" in outputs["trainstack status"] and "cpu-agentic-" in outputs["trainstack status"]
    assert (home / "rl" / "rewards.png").stat().st_size > 1000 and not (home / "rl" / "slime").exists()
    site = next((home / "venvs" / "trainstack" / "lib").glob("python3*/site-packages"))
    assert not (site / "ray").exists() and not (site / "wandb").exists()  # `cpu` needs neither (stand-ins)
    print(f"install doc: {time.monotonic() - started:.0f} s")
    check_the_installed_package_elsewhere(home / "venvs" / "trainstack", tmp_path)


def check_the_installed_package_elsewhere(venv: Path, tmp_path: Path) -> None:
    """From an empty directory: a pip user without slime.root is refused with the clone; `render` and a
    user's own --config-dir work without a checkout."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**user_env(tmp_path), "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}
    ts = str(venv / "bin" / "trainstack")
    r = subprocess.run([ts, "run", "dry_run=true"], cwd=elsewhere, env=env, capture_output=True, text=True,
                       timeout=120)
    commit = load_table().slime_commit
    assert r.returncode == 2 and "error: slime.root:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert f"git clone {slime_root.URL} {elsewhere}/slime && git -C {elsewhere}/slime checkout {commit}" in r.stderr
    assert "submodule" not in r.stderr  # no trainstack checkout here
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


@pytest.mark.slow
def test_a_plain_clone_is_refused_until_make_install_fills_slime(tmp_path):
    """`git clone` without --recursive: the dry run refuses the empty slime/ with the submodule command (it
    said "ready" and the run died with a traceback); `make install`'s first step fills it from a bundle, as an
    offline machine does (`make install SLIME_BUNDLE=...`), and the same dry run is ready."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(clone)], check=True, timeout=120)
    assert (clone / "slime").is_dir() and not any((clone / "slime").iterdir())
    env = {"PYTHONPATH": str(clone), "COLUMNS": "300"}
    for cwd in (clone, tmp_path):  # in the clone, and from another directory (its submodule either way)
        r = subprocess.run([sys.executable, str(clone / "run.py"), "dry_run=true"], cwd=cwd, capture_output=True,
                           text=True, timeout=120, env={**os.environ, **env})
        assert r.returncode == 2 and f"{clone}/slime/slime/__init__.py does not exist" in r.stderr, r.stderr[-3000:]
        assert f"`git submodule update --init slime` in {clone}" in r.stderr and "Traceback" not in r.stderr
    assert not (clone / "runs").exists() and not (tmp_path / "runs").exists()
    name = f"slime-{load_table().slime_commit[:8]}.bundle"  # ../shared beside the checkout (.ci/run), or a worktree's
    bundle = next((p for p in (ROOT.parent / "shared" / "upstream" / name, ROOT.parents[1] / "shared" / "upstream" / name)
                   if p.is_file()), ROOT.parent / "shared" / "upstream" / name)
    if not bundle.is_file():
        pytest.skip(f"no slime bundle at {bundle} to fill the clone's submodule from (CI has one)")
    fill = subprocess.run(["make", "-C", str(clone), "slime-source", f"SLIME_BUNDLE={bundle}"], capture_output=True,
                          text=True, timeout=300)  # what `make install` runs first
    assert fill.returncode == 0 and "slime/: empty; filling it at" in fill.stdout, fill.stdout + fill.stderr
    r = subprocess.run([sys.executable, str(clone / "run.py"), "dry_run=true"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={**os.environ, **env})
    assert r.returncode == 0 and f"slime checkout: {clone}/slime (slime/__init__.py present" in r.stdout, r.stderr
    again = subprocess.run(["make", "-C", str(clone), "slime-source"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "slime/: filled, at" in again.stdout  # a filled one is left as it is
