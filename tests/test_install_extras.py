"""Installing as users install (docs/install.md): pyproject's extras and trainstack/extras.py agree, a
missing optional module is refused by the dry run naming its extra (exit 2, no traceback, nothing
written), and slime.root is resolved one way for every backend (trainstack/upstream/slime_root.py). The wheel
in a fresh venv and a plain clone are tests/test_packaging.py's."""
from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import tomllib
from contextlib import contextmanager
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, files_under
from trainstack import extras
from trainstack.upstream import slime_root
from trainstack.config.backends import BACKENDS

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]


def requirement_names(reqs: list[str]) -> set[str]:
    """Distribution names a requirement list installs, `trainstack[a,b]` expanded to those extras'."""
    out: set[str] = set()
    for req in reqs:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", req)
        assert m, req
        name, inner = m.group(1), m.group(2)
        if name == "trainstack":
            for extra in (inner or "").split(","):
                out |= requirement_names(OPTIONAL[extra.strip()])
        else:
            out.add(re.sub(r"[-_.]+", "-", name).lower())
    return out


def test_extra_names_are_normalised_and_one_per_use():
    """PEP 685 names (`http-env`: a pip skips `http_env` without a word), and the uses the docs name."""
    for name in OPTIONAL:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
    assert {"cpu", "http-env", "ray", "slurm", "lium", "hub", "wandb", "all"} <= set(OPTIONAL)
    uses = set(OPTIONAL) - {"all", "test", "lint", "dev"}
    assert requirement_names(OPTIONAL["all"]) == set().union(*(requirement_names(OPTIONAL[u]) for u in uses))
    assert requirement_names(OPTIONAL["dev"]) >= requirement_names(OPTIONAL["all"])
    assert any(r.startswith("torch==") for r in OPTIONAL["cpu"])  # unpinned: several GB of CUDA wheels


def test_every_module_a_check_names_comes_with_its_extra():
    """trainstack/extras.py's table is pyproject's: each module it looks for is installed by a distribution
    of that extra (this venv has them all: `make install`), and every extra a message names exists."""
    dists = packages_distributions()
    for extra, modules in extras.EXTRAS.items():
        assert extra in OPTIONAL, extra
        names = requirement_names(OPTIONAL[extra])
        for module in modules:
            provided = {re.sub(r"[-_.]+", "-", d).lower() for d in dists.get(module, [])}
            assert provided & names, f"{module} (from {provided}) is not installed by trainstack[{extra}]"
    for backend in BACKENDS.values():
        assert backend.extra is None or set(backend.imports) <= set(extras.EXTRAS[backend.extra])
    assert set(extras.EXTRAS["http-env"]) <= set(extras.EXTRAS["cpu"])  # the CPU agentic run


def test_slimes_url_is_the_submodules():
    modules = configparser.ConfigParser()
    modules.read_string((ROOT / ".gitmodules").read_text())
    assert modules['submodule "slime"']["url"] == slime_root.URL


# --- one slime root ---------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(given_root=st.sampled_from([None, "", "rel/slime", "/abs/slime", "~/slime"]),
       env=st.sampled_from([None, "/env/slime"]), alt=st.sampled_from([None, "/alt/slime"]),
       here=st.booleans(), checkout=st.booleans())
def test_slime_root_is_resolved_by_one_rule(tmp_path, monkeypatch, given_root, env, alt, here, checkout):
    """Given beats $TRAINSTACK_SLIME_ROOT beats $SLIME_ROOT beats ./slime (when it exists) beats the
    trainstack checkout's submodule beats ./slime; always absolute, relative values from the launch dir."""
    cwd = tmp_path / "launch"
    (cwd / "slime").mkdir(parents=True, exist_ok=True)
    if not here:
        (cwd / "slime").rmdir()
    sub = tmp_path / "checkout" / "slime"
    monkeypatch.setattr(slime_root, "checkout_submodule", lambda: sub if checkout else None)
    for var, value in ((slime_root.ENV, env), (slime_root.ALT_ENV, alt)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    got = slime_root.resolve(given_root, cwd)
    assert Path(got).is_absolute()
    if given_root:
        assert got == os.path.realpath(cwd / given_root) if given_root.startswith("rel") else \
            got == os.path.expanduser(given_root)
    elif env or alt:
        assert got == (env or alt)
    elif here or not checkout:
        assert got == str(cwd / "slime")
    else:
        assert got == str(sub)


def test_the_launch_hands_the_cpu_trainer_its_slime_root(in_tmp):
    from trainstack.render.pipeline import build_from_overrides

    (in_tmp / "mine").mkdir()
    run, cmd = build_from_overrides(["slime.root=mine"])
    assert run.slime.root == str(in_tmp / "mine") == cmd.env[slime_root.ENV]
    run, cmd = build_from_overrides([])  # unset, no ./slime here: this checkout's submodule
    assert cmd.env[slime_root.ENV] == str(ROOT / "slime")


# --- a missing optional module is the dry run's refusal, naming the extra ----------------------------------
@contextmanager
def hidden(*modules: str):
    """`import m` fails and find_spec(m) is None for each of `modules`, as in a venv without them."""
    saved = {m: sys.modules.get(m, ...) for m in modules}
    try:
        for m in modules:
            sys.modules[m] = None  # type: ignore[assignment]
        yield
    finally:
        for m, v in saved.items():
            if v is ...:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = v


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """The CPU default and the agentic run, composed once (a preflight is cheap, composing is not)."""
    from trainstack.render.pipeline import build_from_overrides

    where = tmp_path_factory.mktemp("extras")
    old = os.getcwd()
    os.chdir(where)
    try:
        return {exp: build_from_overrides([f"experiment={exp}"]) for exp in ("cpu-smoke", "cpu-agentic")}
    finally:
        os.chdir(old)


CPU_MODULES = sorted(set(extras.EXTRAS["cpu"]))


@settings(max_examples=40, deadline=None)
@given(gone=st.sets(st.sampled_from(CPU_MODULES)), experiment=st.sampled_from(["cpu-smoke", "cpu-agentic"]))
def test_any_missing_cpu_module_is_named_with_its_extra(composed, gone, experiment):
    """Whatever subset of the `cpu` extra is missing, the dry run names exactly the missing modules a run
    imports, each under the key that needs it, with `pip install 'trainstack[cpu]'`; nothing else fails."""
    from trainstack.errors import ConfigErrors
    from trainstack.preflight.checks import preflight

    run, cmd = composed[experiment]
    needed = set(BACKENDS["tiny"].imports) | (set(extras.EXTRAS["http-env"]) if experiment == "cpu-agentic" else set())
    with hidden(*gone):
        try:
            preflight(run, cmd, launching=False)
            errors = []
        except ConfigErrors as err:
            errors = err.errors
    expected = gone & needed
    assert all(e.key in ("cluster.backend", "env.meta.http_env") for e in errors), errors
    named = {m for e in errors for m in expected if re.search(rf"\b{m}\b", e.problem)}
    assert named == expected and bool(errors) == bool(expected), (gone, errors)
    assert all("`cpu` extra" in e.problem and e.fix.startswith("pip install 'trainstack[cpu]'") for e in errors)


HIDE = "import sys; [sys.modules.__setitem__(m, None) for m in sys.argv.pop(1).split(',')]; "


def run_hiding(modules: str, *argv: str, cwd: Path, cli: bool = False) -> subprocess.CompletedProcess:
    entry = ("from trainstack.cli.main import main; sys.exit(main())" if cli else
             f"sys.argv[0] = {str(ROOT / 'run.py')!r}; import runpy; runpy.run_path(sys.argv[0], run_name='__main__')")
    return subprocess.run([sys.executable, "-c", HIDE + entry, modules, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"})


@pytest.mark.parametrize("modules,argv,key,extra", [
    ("torch", ["env.num_rollout=2"], "cluster.backend", "cpu"),  # the launch: refused before anything runs
    ("uvicorn", ["experiment=cpu-agentic", "dry_run=true"], "env.meta.http_env", "cpu"),
    ("wandb", ["args.use_wandb=true", "args.wandb_mode=offline", "dry_run=true"], "args.use_wandb", "wandb"),
    ("ray", ["cluster.launcher=ray_job", "dry_run=true"], "cluster.launcher", "ray"),
])
def test_the_user_sees_one_message_naming_the_extra(tmp_path, modules, argv, key, extra):
    res = run_hiding(modules, *argv, cwd=tmp_path)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"error: {key}: " in res.stderr and f"pip install 'trainstack[{extra}]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "nothing was launched" in res.stderr
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("modules,argv,error,extra", [
    ("matplotlib", ["compare", "some-run", "--plot", "out.png"], "--plot: a plot needs the `cpu` extra: matplotlib",
     "cpu"),
    ("lium", ["commander", "serve"], "commander: the Lium commander (Lium's SDK, its HTTP API) needs the `lium` extra",
     "lium"),
])
def test_commands_without_their_extra_name_it(tmp_path, modules, argv, error, extra):
    res = run_hiding(modules, *argv, cwd=tmp_path, cli=True)
    assert res.returncode == 2 and f"error: {error}" in res.stderr, res.stderr
    assert f"pip install 'trainstack[{extra}]'" in res.stderr and "Traceback" not in res.stderr
    assert files_under(tmp_path) == []


def test_slimes_cpu_path_imports_ray_and_wandb_without_them(tmp_path):
    """The `cpu` extra has neither: slime's rollout modules still import (stand-ins), and using one names
    the extra that brings it. Run in a subprocess where both are missing."""
    code = ("import sys, importlib.util as u; find = u.find_spec; "  # a venv without ray and wandb
            "u.find_spec = lambda n, *a: None if n.split('.')[0] in ('ray', 'wandb') else find(n, *a); "
            "from trainstack.tiny import slime_upstream as s; s.load(); import slime.utils.data, ray, wandb; "
            "print('standin', ray.__trainstack_standin__, wandb.__trainstack_standin__); ray.get(1)")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "standin True True" in res.stdout, res.stderr[-3000:]
    assert "ModuleNotFoundError: ray.get: ray is not installed" in res.stderr
    assert "pip install 'trainstack[ray]'" in res.stderr


def test_make_install_says_what_it_does_and_shows_pips_progress():
    """`make install` was minutes of `pip -q` silence: it fills slime/ first and lets pip report."""
    make = subprocess.run(["make", "-n", "-s", "-C", str(ROOT), "install", "-W", "pyproject.toml"], capture_output=True,
                          text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    lines = make.stdout.splitlines()
    pip = [ln for ln in lines if " -m pip install" in ln]
    assert pip and not any(re.search(r"\s-q\b", ln) for ln in pip), pip
    assert lines[0].startswith("scripts/fill-slime.sh") and any("make install: creating" in ln for ln in lines)
