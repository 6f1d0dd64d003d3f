"""The core knows no feature: core modules never import hub, http_env or tiny (features join through
trainstack/hooks.py); the core's folders stand in floors, a lower folder never importing a higher one
(docs/architecture.md); features import no other feature but through hooks (the few listed by name); and the
hook points fire, in order, in a real dry run and a real tiny run."""
from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT, run_py

PKG = ROOT / "trainstack"
FEATURES = ("trainstack.hub", "trainstack.http_env", "trainstack.tiny", "trainstack.inputs", "trainstack.script_import",
            "trainstack.evals", "trainstack.export")
# The core's floors, lowest first (docs/architecture.md): a module may import its own folder, its floor and the
# floors below, never one above. "base" is the top-level modules but the API (the package's face, `trainstack`,
# counts as base: `from trainstack import __version__`); "api" is trainstack/api.py and __main__.py.
BASE = ("__init__", "errors", "secrets", "features", "hooks", "extras", "procgroup", "registry")
FLOORS = (("base",), ("terminal", "storage"), ("fencing", "upstream"), ("config",), ("metrics", "rules"), ("render",),
          ("run",), ("preflight",), ("launch",), ("reports",), ("sweep",), ("cli",), ("api",))
# The core: every top-level module of the package and every module of the core's folders (the launchers too: a
# launcher is a plugin of the core and knows no feature either).
CORE_DIRS = tuple(d for floor in FLOORS for d in floor if d not in ("base", "api"))
CORE = sorted([*PKG.glob("*.py"), *(p for d in CORE_DIRS for p in (PKG / d).rglob("*.py"))])
NOT_CORE: set[str] = set()
CORE_NAMES = ("pipeline", "resolve", "validate", "command", "spec", "lifecycle", "resume", "checks", "schema",
              "app", "display", "status", "main", "host_checks", "checkpoints", "hooks", "features", "points")
# Features (and the commander, which serves the Lium launcher) may import the core; one feature imports another
# only here, each by name and for what it reuses: the tiny model's files and arithmetic (its checkpoint, HF
# export, tokenizer), the eval planner, the Hub client.
OUTSIDE = (*(f.split(".")[1] for f in FEATURES), "commander", "sitehook")
FEATURE_TIES = {("export", "tiny"), ("export", "evals"), ("export", "hub"), ("http_env", "tiny"), ("inputs", "tiny")}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (function-level and TYPE_CHECKING imports too)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def test_core_modules_import_no_feature():
    names = {p.stem for p in CORE}
    assert set(CORE_NAMES) <= names, set(CORE_NAMES) - names  # the list below covers what the issue names
    bad = [f"{p.relative_to(ROOT)}:{line} imports {mod}" for p in CORE if p.name not in NOT_CORE
           for line, mod in imported_modules(p) if mod.startswith(FEATURES)]
    assert not bad, "core modules import features (register a hook in trainstack/hooks.py instead):\n" + "\n".join(bad)


def test_the_import_check_sees_function_level_and_relative_imports(tmp_path):
    probe = PKG / "launch" / "_probe_for_test.py"  # a file inside the package, so relative imports resolve
    probe.write_text("def f():\n    from trainstack.hub.restore import lookup\n    from ..http_env import rules\n"
                     "    import trainstack.tiny.cli\n")
    try:
        mods = [m for _, m in imported_modules(probe)]
    finally:
        probe.unlink()
    assert "trainstack.hub.restore" in mods and "trainstack.http_env.rules" in mods and "trainstack.tiny.cli" in mods


def room(module: str) -> str:
    """The folder (or "base"/"api") a dotted module of trainstack stands in."""
    parts = module.split(".")
    if len(parts) == 1:
        return "base"  # the package's face
    head = parts[1]
    if head in BASE:
        return "base"
    if head in ("api", "__main__"):
        return "api"
    return head


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def trainstack_imports(path: Path) -> list[tuple[int, str]]:
    """What a file imports of trainstack, as modules: `from trainstack.x import y` is trainstack.x.y when y is a
    module (or package), else trainstack.x."""
    out = []
    for line, mod in imported_modules(path):
        if mod.split(".")[0] != "trainstack":
            continue
        as_path = ROOT.joinpath(*mod.split("."))
        if as_path.with_suffix(".py").is_file() or as_path.is_dir() or mod == "trainstack":
            out.append((line, mod))
    # a name imported from a module (trainstack.x.name) leaves trainstack.x, which is listed too
    return out


def floor_of(name: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if name in floor)


def test_every_module_of_the_package_stands_in_a_floor_or_is_a_feature():
    rooms = {room(module_of(p)) for p in PKG.rglob("*.py")}
    placed = {d for floor in FLOORS for d in floor}
    assert rooms <= placed | set(OUTSIDE), rooms - placed - set(OUTSIDE)
    assert len(list(PKG.glob("*.py"))) <= 12  # the rest lives in folders by concern


def test_a_lower_floor_never_imports_a_higher_one():
    bad = []
    for p in CORE:
        # the package's face hands the API's names on when first asked (PEP 562): as an importer it stands with the API
        src = "api" if p == PKG / "__init__.py" else room(module_of(p))
        for line, mod in trainstack_imports(p):
            dst = room(mod)
            if dst in OUTSIDE or dst == src:
                continue
            if floor_of(dst) > floor_of(src):
                bad.append(f"{p.relative_to(ROOT)}:{line} ({src}) imports {mod} ({dst})")
    assert not bad, "a lower floor imports a higher one (move the name down, or pass it in):\n" + "\n".join(bad)


def test_features_import_no_other_feature_but_the_listed_ties():
    bad = []
    for p in PKG.rglob("*.py"):
        src = room(module_of(p))
        if src not in OUTSIDE:
            continue
        for line, mod in trainstack_imports(p):
            dst = room(mod)
            if dst in OUTSIDE and dst != src and dst != "commander" and (src, dst) not in FEATURE_TIES:
                bad.append(f"{p.relative_to(ROOT)}:{line} ({src}) imports {mod} ({dst})")
    assert not bad, "a feature imports another (join through trainstack/hooks.py):\n" + "\n".join(bad)


def test_features_are_found_through_the_entry_point_group():
    from trainstack import hooks
    from trainstack.features import declared

    assert {"upstream", "hub", "http_env", "tiny"} <= set(declared())
    from importlib.metadata import entry_points

    assert declared() == {e.name: e.value for e in entry_points(group="trainstack.features")}  # read as pip wrote it
    reg = hooks.Registry()
    from trainstack.features import discover

    for name, register in discover():
        reg.register(name, register)
    assert reg.features == sorted(reg.features)
    assert len(reg.get(hooks.RULES)) >= 20 and reg.get(hooks.PREFLIGHT) and reg.get(hooks.RESUME_LOOKUP)
    from trainstack.rules.upstream_rules import UPSTREAM

    assert reg.get(hooks.RULES)[: len(UPSTREAM)] == UPSTREAM  # built-in ports first (order=10), then features'


def test_hook_order_is_deterministic():
    from trainstack import hooks

    calls: list[str] = []
    reg = hooks.Registry()
    reg.register("zeta", lambda r: r.add(hooks.DRY_RUN_NOTES, lambda run: calls.append("zeta") or []))
    reg.register("alpha", lambda r: (r.add(hooks.DRY_RUN_NOTES, lambda run: calls.append("alpha-1") or []),
                                     r.add(hooks.DRY_RUN_NOTES, lambda run: calls.append("alpha-2") or [])))
    reg.register("late", lambda r: r.add(hooks.DRY_RUN_NOTES, lambda run: calls.append("first") or [], order=1))
    for note in reg.get(hooks.DRY_RUN_NOTES):
        note(None)
    assert calls == ["first", "alpha-1", "alpha-2", "zeta"]
    with pytest.raises(ValueError, match="unknown hook point"):
        reg.add(hooks.HookPoint("nope", "not a point"), print)


RECORDER = '''
"""A third party's feature: records every hook point it is called at (tests/test_architecture.py)."""
import json, os
from trainstack import hooks


def _log(point, **info):
    with open(os.environ["RECORD_HOOKS"], "a") as f:
        f.write(json.dumps({"point": point, **info}) + "\\n")


class _Companion:
    def on_signal(self, signum, grace_s):
        _log("on_signal")

    def after_trainer(self, signalled):
        _log("after_trainer", signalled=signalled)


def _wrap(spec, start):
    _log("wrap_runner")

    def start_logged(env, rundir):
        _log("start")
        return start(env, rundir)
    return start_logged


def register(r):
    r.add(hooks.IDENTITY, lambda meta: _log("identity") or {})
    r.add(hooks.RULES, lambda ctx: _log("rules") or [])
    r.add(hooks.PREFLIGHT, lambda run, cmd, made: _log("preflight", backend=run.cluster.backend) or [])
    r.add(hooks.RESUME_LOOKUP, lambda run, latest, dry: _log("resume_lookup", dry=dry, latest=latest))
    r.add(hooks.DRY_RUN_NOTES, lambda run: _log("dry_run_notes") or ["recorder: a third-party note"])
    r.add(hooks.WRAP_RUNNER, _wrap)
    r.add(hooks.BEFORE_TRAINER, lambda ctx: _log("before_trainer", action=ctx.plan.action))
    r.add(hooks.TRAINER_STARTED, lambda ctx: _log("trainer_started") or _Companion())
'''


@pytest.fixture
def recorder(tmp_path):
    """A feature installed the way a third party's is: a distribution on the path whose metadata
    declares a `trainstack.features` entry point."""
    site = tmp_path / "site"
    (site / "recorder_dist-0.1.dist-info").mkdir(parents=True)
    (site / "recorder_dist-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: recorder-dist\n"
                                                                    "Version: 0.1\n")
    (site / "recorder_dist-0.1.dist-info" / "entry_points.txt").write_text(
        "[trainstack.features]\nrecorder = recorder_feature:register\n")
    (site / "recorder_feature.py").write_text(RECORDER)
    log = tmp_path / "hooks.jsonl"
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{site}", "RECORD_HOOKS": str(log)}

    def points() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return env, points


def test_hook_points_fire_in_order_in_a_real_dry_run(tmp_path, recorder):
    env, points = recorder
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "dry_run=true", f"paths.runs_root={tmp_path}/runs",
                          f"paths.data_root={tmp_path}/data"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, **env})
    assert res.returncode == 0, res.stderr
    assert "recorder: a third-party note" in res.stdout
    seen = [p["point"] for p in points()]
    assert seen == ["identity", "rules", "preflight", "dry_run_notes"], seen  # no run dir yet: no resume lookup
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_hook_points_fire_in_order_in_a_real_tiny_run(tmp_path, recorder):
    env, points = recorder
    res = run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=hooked",
                 "env.num_rollout=2", "env.eval_interval=null", "env.eval_prompt_data=null", cwd=tmp_path, env=env,
                 timeout=300)
    assert res.returncode == 0, res.stderr
    seen = [p["point"] for p in points()]
    # build + preflight (launch), then the lifecycle: wrap, plan (not dry: a launch reads remotes), before,
    # start, beside, after. The resume lookup runs once per plan made with a run dir present.
    assert seen[:3] == ["identity", "rules", "preflight"], seen
    life = seen[seen.index("wrap_runner"):]
    assert life == ["wrap_runner", "resume_lookup", "before_trainer", "start", "trainer_started", "after_trainer"], seen
    lookups = [p for p in points() if p["point"] == "resume_lookup"]
    assert lookups[-1]["dry"] is False
    relaunch = run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=hooked",
                      "env.num_rollout=2", "env.eval_interval=null", "env.eval_prompt_data=null", cwd=tmp_path,
                      env=env, timeout=300)
    assert relaunch.returncode == 0 and "is finished" in relaunch.stderr, relaunch.stderr
    finished = [p for p in points() if p["point"] == "before_trainer"][-1]
    assert finished["action"] == "finished" and points()[-1]["point"] == "before_trainer"  # nothing starts


class Listener:
    """A TCP endpoint that counts connections (an HF_ENDPOINT that records whether anyone called)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()  # no answer: the client sees a dead Hub

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


def test_a_dry_run_of_a_hub_synced_run_reads_no_network(tmp_path):
    """The run dir exists (so the resume plan is made): a dry run still makes no connection to the
    Hub, succeeds, and says what a launch would read; hub.dry_run_lookup=true asks for the read."""
    pytest.importorskip("huggingface_hub")
    hub = Listener()
    try:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_" + "0" * 32, "HF_HOME": str(tmp_path / "hf"),
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
        args = ["dry_run=true", f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data",
                "run_id=synced", "hub.repo_id=team/ckpts"]
        (tmp_path / "runs" / "synced").mkdir(parents=True)
        dry = run_py(*args, cwd=tmp_path, env=env)
        assert dry.returncode == 0, dry.stderr
        assert hub.connections == 0
        assert "a launch first reads team/ckpts" in dry.stdout and "hub.dry_run_lookup=true" in dry.stdout
        asked = run_py(*args, "hub.dry_run_lookup=true", cwd=tmp_path, env=env, timeout=180)
        assert hub.connections > 0  # the guard sees a call when there is one
        assert asked.returncode == 2 and "cannot read run synced's checkpoint pointer" in asked.stderr, asked.stderr
    finally:
        hub.close()


def test_a_rule_registered_through_the_api_refuses_a_run(in_tmp):
    """validate.rules hooks join the core's rules (and validate.RULES, which the parse oracle reads)."""
    from trainstack import hooks
    from trainstack.rules import validate
    from trainstack.errors import ConfigError, ConfigErrors
    from trainstack.render.pipeline import build_from_overrides

    def no_big_lr(ctx):
        lr = ctx.get("lr")
        return [ctx.err("lr", "above this lab's limit", "lower it")] if lr and lr > 0.01 else []

    reg = hooks.Registry()
    reg.register("lab", lambda r: r.add(hooks.RULES, no_big_lr))
    old = hooks.use(reg)
    try:
        assert no_big_lr in list(validate.RULES)
        build_from_overrides(["algo.lr=0.001"])
        with pytest.raises(ConfigErrors) as err:
            build_from_overrides(["algo.lr=0.5"])
        assert [(e.key, e.problem) for e in err.value.errors] == [("algo.lr", "above this lab's limit")]
        assert isinstance(err.value.errors[0], ConfigError)
    finally:
        hooks.use(old)
    assert no_big_lr not in list(validate.RULES)


def test_an_install_older_than_the_group_reads_the_checkouts_pyproject(tmp_path, monkeypatch):
    """Metadata written before pyproject.toml had the group would silently drop every feature's
    checks and hooks; the checkout's own pyproject.toml is read instead."""
    from trainstack import features

    stale = tmp_path / "trainstack-0.1.0.dist-info"
    stale.mkdir()
    (stale / "entry_points.txt").write_text("[console_scripts]\ntrainstack = trainstack.cli.main:main\n")
    found, ours = features._scan([str(tmp_path)])
    assert found == {} and ours is False
    monkeypatch.setattr(features, "_scan", lambda paths, group=features.GROUP: ({}, False))
    assert set(features.declared()) == {"upstream", "hub", "http_env", "tiny", "inputs", "script_import", "evals", "export"}


def test_a_dry_run_sweep_builds_and_preflights_each_point_once(tmp_path, recorder):
    """The sweep launcher checks every point before the first one runs; a dry-run point's own task
    prints that check instead of building and preflighting the same config a second time."""
    env, points = recorder
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "-m", "dry_run=true", "algo.lr=1e-6,2e-6,3e-6",
                          f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data",
                          f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=180, env={**os.environ, **env})
    assert res.returncode == 0, res.stderr
    assert len([line for line in res.stdout.splitlines() if line.startswith("ok ")]) == 3, res.stdout
    seen = [p["point"] for p in points()]
    assert seen.count("preflight") == 3 and seen.count("identity") == 3, seen


def test_a_feature_that_cannot_be_loaded_is_named(monkeypatch):
    from trainstack import features

    monkeypatch.setattr(features, "declared", lambda: {"broken": "no_such_module_xyz:register"})
    from trainstack.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as err:  # one clear message at the CLI (exit 2), not a traceback
        features.discover()
    assert err.value.errors[0].key == "trainstack.features"
    assert "the feature 'broken' (no_such_module_xyz:register) cannot be loaded: ModuleNotFoundError" in \
        err.value.errors[0].problem
