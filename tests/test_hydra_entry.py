"""trainstack/config/hydra_entry.py against Hydra itself: a single run composed once gives the task what
`@hydra.main` gives it (the config and `HydraConfig`), and anything else is left to `@hydra.main`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_py
from hypothesis import given, settings
from hypothesis import strategies as st
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


# --------------------------------------------------------------------------------------------------
# the kept base (trainstack/config/compose_cache.py): a hit gives what Hydra composes, and nothing stale
# --------------------------------------------------------------------------------------------------
def _no_compose(monkeypatch):
    """Hydra's composition made to fail: a run that still works took the kept base."""
    from hydra._internal.hydra import Hydra

    def refuse(*_a, **_k):
        raise AssertionError("composed although a base was kept")

    monkeypatch.setattr(Hydra, "compose_config", refuse)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from trainstack.config import compose_cache

    d = tmp_path / "compose-cache"
    monkeypatch.setenv(compose_cache.CACHE_ENV, str(d))
    monkeypatch.setattr(compose_cache, "RACY_S", 0.0)  # files written by the test itself count as settled
    return d


@pytest.mark.parametrize("argv", [
    ["dry_run=true", "run_id=a"],
    ["dry_run=true", "experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "algo.lr=2e-6", "run_id=b"],
    ["dry_run=false", "++args.seed=3"],
])
def test_a_kept_base_gives_what_hydra_main_gives(argv, tmp_path, monkeypatch, cache):
    from trainstack.config import compose_cache

    monkeypatch.chdir(tmp_path)
    register_launchers()
    first = through_run_single(argv, str(CONF_DIR))
    compose_cache.wait_stored()  # written in a thread of its own
    assert sorted(p.suffix for p in cache.iterdir()) == [".base", ".groups"]
    theirs = through_hydra_main(argv, str(CONF_DIR))
    with monkeypatch.context() as m:
        _no_compose(m)
        again = through_run_single(argv, str(CONF_DIR))
        other_values = [a if not a.startswith("run_id=") else "run_id=zz" for a in argv] + ["++args.seed=7"]
        through_run_single(other_values, str(CONF_DIR))  # new values, same structure: the same base serves
    assert first == theirs == again
    import pickle

    from omegaconf import OmegaConf

    with open(next(cache.glob("*.base")), "rb") as f:
        f.readline()
        assert OmegaConf.get_cache(pickle.load(f)) == {}  # `${now:...}` read while composing: resolved anew
    assert SEEN[-1]["hydra"]["overrides"]["task"][-1] == "++args.seed=7"
    assert not [p for p in tmp_path.iterdir() if p.name != "compose-cache"]


def _tree(conf: Path, files: dict[str, str], tick: list[int]) -> None:
    """Write `files` under conf (None removes one), each with a new mtime (sizes may repeat)."""
    import os

    for rel, text in files.items():
        path = conf / rel
        if text is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        tick[0] += 1
        os.utime(path, ns=(tick[0] * 10**9, tick[0] * 10**9))
    for d in [conf, *[p for p in conf.rglob("*") if p.is_dir()]]:
        tick[0] += 1
        os.utime(d, ns=(tick[0] * 10**9, tick[0] * 10**9))


def _reference(conf: Path, overrides: list[str]) -> dict | None:
    """Hydra's own composition of the whole command line, seen as the task sees it (None: it refuses)."""
    from hydra._internal import utils as hydra_utils
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    task_name = hydra_utils.detect_task_name(*hydra_utils.detect_calling_file_or_module_from_task_function(task))
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(task_name=task_name,
                                     config_search_path=hydra_utils.create_config_search_path(str(conf)))
    try:
        cfg = hydra.compose_config("config", overrides, run_mode=RunMode.RUN)
    except Exception:  # noqa: BLE001 - refused: run_single must refuse too
        return None
    finally:
        GlobalHydra.instance().clear()
    hc = OmegaConf.to_container(cfg.hydra, resolve=False)
    hc["runtime"].pop("output_dir", None)  # as task() sees it
    hc["mode"] = RunMode.RUN
    hc["overrides"]["hydra"].append("hydra.mode=RUN")
    return {"cfg": {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
                    for k in cfg if k != "hydra"}, "hydra": hc}


def _ours(conf: Path, overrides: list[str]) -> dict | None:
    from trainstack.config import compose_cache

    SEEN.clear()
    ran = run_single(task, str(conf), "config", overrides, version_base="1.3")
    compose_cache.wait_stored()
    return SEEN[-1] if ran else None


CONFIG = "defaults:\n  - _self_\n  - db: mysql\ndry_run: true\na: 1\nb:\n  c: 2\n"
OVERRIDES = st.sampled_from(["db=mysql", "db=pg", "db=new", "a=5", "a=6", "b.c=7", "+x=1", "++a=8", "~b",
                             "db.host=h", "db.port=1", "+db=pg", "hydra.job.name=j", "nope=1", "a=1,2", "extra=on"])
EDITS = st.sampled_from([
    {"config.yaml": CONFIG},
    {"config.yaml": "defaults:\n  - _self_\n  - db: pg\ndry_run: true\na: 2\nb:\n  c: 3\n"},
    {"config.yaml": "defaults:\n  - db: mysql\n  - _self_\ndry_run: true\na: 3\nb:\n  c: 4\n"},
    {"db/mysql.yaml": "host: m\n"}, {"db/mysql.yaml": "host: n\n"}, {"db/mysql.yaml": "port: 9\n"},
    {"db/pg.yaml": "host: p\nport: 5\n"}, {"db/pg.yaml": None},
    {"db/new.yaml": "host: q\n"}, {"db/new.yaml": None},
    {"extra/on.yaml": "flag: true\n"}, {"extra/on.yaml": None},
])


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.one_of(st.tuples(st.just("run"), st.lists(OVERRIDES, max_size=4)),
                                st.tuples(st.just("edit"), EDITS)), min_size=1, max_size=8))
def test_kept_bases_never_differ_from_hydra(steps):
    """Any command lines over a tree edited between runs: what the task gets, kept base or not, is what
    Hydra composes from the whole command line (or both refuse)."""
    import os
    import tempfile

    from trainstack.config import compose_cache

    with tempfile.TemporaryDirectory() as tmp:
        conf, tick = Path(tmp) / "conf", [10**9]
        _tree(conf, {"config.yaml": CONFIG, "db/mysql.yaml": "host: m\n", "db/pg.yaml": "host: p\nport: 5\n"}, tick)
        old = {k: os.environ.get(k) for k in (compose_cache.CACHE_ENV,)}
        os.environ[compose_cache.CACHE_ENV] = str(Path(tmp) / "cache")
        racy, compose_cache.RACY_S = compose_cache.RACY_S, 0.0
        try:
            for kind, what in steps:
                if kind == "edit":
                    _tree(conf, what, tick)
                    continue
                for _ in range(2):  # the first may compose and keep; the second may take what was kept
                    assert _ours(conf, list(what)) == _reference(conf, list(what)), what
        finally:
            compose_cache.RACY_S = racy
            for k, v in old.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_what_is_not_kept(tmp_path, monkeypatch, cache):
    """Files changed just now (git's racy rule), a composition that warns, environment values copied into
    the config: composed every time. A torn entry or a directory others can write: composed again."""
    from trainstack.config import compose_cache

    conf, tick = tmp_path / "conf", [10**9]
    _tree(conf, {"config.yaml": "defaults:\n  - _self_\n  - db: mysql\ndry_run: true\na: 1\n",
                 "db/mysql.yaml": "host: m\n"}, tick)
    monkeypatch.setattr(compose_cache, "RACY_S", 2.0)
    (conf / "db" / "mysql.yaml").write_text("host: m\n")  # mtime now
    assert _ours(conf, ["a=2"]) == _reference(conf, ["a=2"])
    assert not cache.exists() or not list(cache.iterdir())
    monkeypatch.setattr(compose_cache, "RACY_S", 0.0)
    _tree(conf, {"config.yaml": "defaults:\n  - db: mysql\ndry_run: true\na: 1\n"}, tick)
    for _ in range(2):
        with pytest.warns(UserWarning, match="missing `_self_`"):  # Hydra's warning: shown each time, never kept
            assert _ours(conf, ["a=3"])
    assert not cache.exists() or not list(cache.iterdir())
    _tree(conf, {"config.yaml": "defaults:\n  - _self_\n  - db: mysql\ndry_run: true\na: 1\nhydra:\n  job:\n"
                                "    env_copy: [HOME]\n"}, tick)
    assert _ours(conf, ["a=3"])
    assert not cache.exists() or not list(cache.iterdir())
    _tree(conf, {"config.yaml": "defaults:\n  - _self_\n  - db: mysql\ndry_run: true\na: 1\n"}, tick)
    assert _ours(conf, ["a=4"])
    base = next(cache.glob("*.base"))
    base.write_bytes(base.read_bytes()[:-40])  # torn
    assert _ours(conf, ["a=5"]) == _reference(conf, ["a=5"])
    cache.chmod(0o777)
    with monkeypatch.context() as m:
        _no_compose(m)
        assert _ours(conf, ["a=6"]) is None  # a directory anyone can write: not read, so it composed (and failed)
    cache.chmod(0o700)
    with monkeypatch.context() as m:
        _no_compose(m)
        assert _ours(conf, ["a=7"])["cfg"]["a"] == 7


def test_run_py_answers_the_same_from_a_kept_composition(tmp_path):
    """The whole dry run (its rendered command, env and checks) from a kept composition is the one a fresh
    composition gives: `run.py` three times, the second and third taking what the first kept."""
    import json
    import os

    cache = tmp_path / "cache"
    argv = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "cluster.lium.pod.image=x/y:1", "algo.lr=3e-6",
            "dry_run=true"]
    got = {}
    for name, where in (("cold", "0"), ("first", str(cache)), ("kept", str(cache))):
        res = run_py(*argv, f"output={tmp_path / name}.json", cwd=tmp_path,
                     env={**os.environ, "TRAINSTACK_COMPOSE_CACHE": where})
        assert res.returncode == 0, res.stderr[-2000:]
        got[name] = json.loads((tmp_path / f"{name}.json").read_text())
        if name == "first":
            assert sorted(p.suffix for p in cache.iterdir()) == [".base", ".groups"]
    assert got["cold"] == got["first"] == got["kept"]
