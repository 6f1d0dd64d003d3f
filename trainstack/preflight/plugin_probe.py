"""The plugins' verdict, asked of the trainer's own interpreter.

A run's plugin dests (`custom_rm_path=pkg.module.fn`, ...) are imported by the trainer, with the
trainer's PYTHONPATH and environment (the runtime env the spec stores), not the launcher's. So the
dry run, the launch and `trainstack exec` (on a remote trainer's host) start that interpreter once
with that environment, in the trainer's working directory and `sys.path[0]`, and let it import each
plugin as slime's `load_function` does and check it against slime's contract
(`trainstack/upstream/plugin_contract.py`, which is also the child's code). The trainer's backend may name a
prelude it runs before loading plugins (the tiny backend makes slime's own modules importable).

A user's shell `PYTHONPATH` is not the trainer's: the trainer's is the run's runtime env (shown by
the dry run), so that the stored run behaves the same from any shell and on any host. A plugin found
only through the shell's PYTHONPATH (or in the directory you launch from) is refused with the fix,
`runtime_env.pythonpath=[DIR]`.

Cost: one interpreter start plus the plugins' imports (tens of milliseconds for the CPU default, a
second or two for a plugin that imports torch). A passing verdict is kept in the process (a sweep
probes once) and on disk (`$XDG_CACHE_HOME/trainstack/plugin-verdicts`), keyed by the interpreter, the
environment that decides imports, the plugins and the arguments of the contract; it holds only while
every non-library file the probe imported, the plugins' own files and the interpreter's site-packages
directories are unchanged (size and mtime). A refusal is never kept: the next check asks again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError
from trainstack.rules.plugin_paths import locate, renamed

# `facts` below is the host check's trainstack.preflight.host_checks.HostFacts, typed loosely: the host check asks this
# module (it passes the slime script it found), never the other way round.
HostFacts = Any

CHILD = Path(__file__).resolve().parents[1] / "upstream" / "plugin_contract.py"
TIMEOUT_S = 180.0
# set per run by trainstack (render.runtime_env): they never decide what imports
PER_RUN_VARS = frozenset({"TENSORBOARD_DIR", "WANDB_RUN_ID", "WANDB_RESUME"})
# variables of the launching shell that decide what the trainer's interpreter imports
IMPORT_VARS = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
               "VIRTUAL_ENV", "HOME", "TRAINSTACK_SLIME_ROOT", "LD_LIBRARY_PATH")
CACHE_ENV = "TRAINSTACK_PLUGIN_CACHE"  # a directory for kept verdicts; "0" keeps none on disk


@dataclass(frozen=True)
class Probe:
    """What the trainer's interpreter is asked: everything that decides the verdict."""

    interpreter: str  # argv[0] of the trainer, looked up on the trainer's PATH
    cwd: str
    path0: str  # the trainer's sys.path[0]
    runtime_env: dict[str, str]  # the run's (SlimeCommand.env)
    shell_env: dict[str, str]  # the launching process's; the runtime env overrides it (lifecycle.trainer_env)
    prelude: str | None
    plugins: tuple[tuple[str, str], ...]  # (dest, dotted value)
    group_rm: bool

    @property
    def env(self) -> dict[str, str]:
        return {**self.shell_env, **self.runtime_env}

    def key(self) -> str:
        env = {k: v for k, v in self.runtime_env.items() if k not in PER_RUN_VARS}
        shell = {k: self.shell_env.get(k) for k in IMPORT_VARS}
        exe = self.executable() or self.interpreter
        try:
            st = os.stat(exe)
            exe_id: list[Any] = [os.path.realpath(exe), st.st_mtime_ns, st.st_size]
        except OSError:
            exe_id = [exe]
        blob = json.dumps([exe_id, self.cwd, self.path0, sorted(env.items()), sorted(shell.items()), self.prelude,
                           self.plugins, self.group_rm, _child_version()], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def executable(self) -> str | None:
        return shutil.which(self.interpreter, path=self.env.get("PATH", os.defpath))


@dataclass
class Verdict:
    """The child's answer: per plugin, ok or why not; or why the probe itself failed."""

    plugins: list[dict[str, Any]]
    python: str = ""
    failure: str = ""  # the probe could not run (no interpreter, timeout, crash)
    prelude_error: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    library_dirs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failure and self.prelude_error is None and all(p["verdict"] == "ok" for p in self.plugins)


# passing verdicts of this process: key -> (verdict, the stamps it holds while). A refusal is not kept: the next
# check asks again (a user who fixed the plugin in a notebook, the API's dry_run again).
_MEMO: dict[str, tuple[Verdict, dict[str, list[int] | None]]] = {}


def probe_for(facts: "HostFacts", plugins: list[tuple[str, str]], script: Path | None) -> Probe:
    """The probe of a run: the trainer's interpreter, environment, working directory and sys.path[0]
    (`script`: the slime entrypoint the launch would start, trainstack.preflight.host_checks.slime_script)."""
    from trainstack.config.backends import BACKENDS

    cmd = facts.command
    path0 = str(script.resolve().parent) if script is not None else cmd.cwd
    backend = BACKENDS.get(facts.backend)
    return Probe(interpreter=cmd.entrypoint[0], cwd=cmd.cwd, path0=path0, runtime_env=dict(cmd.env),
                 shell_env=dict(os.environ),
                 prelude=backend.prelude if backend is not None else None, plugins=tuple(plugins),
                 group_rm=bool(facts.args.get("group_rm")))


def run(probe: Probe) -> Verdict:
    """The verdict: from this process's memory, the disk, or the trainer's interpreter."""
    key = probe.key()
    memo = _MEMO.get(key)
    if memo is not None and _holds(memo[1]):
        return memo[0]
    kept = _kept(key)
    if kept is not None:
        _MEMO[key] = kept
        return kept[0]
    verdict = _ask(probe)
    if verdict.ok:
        stamps = _stamps(verdict)
        _keep(key, verdict, stamps)
        _MEMO[key] = (verdict, stamps)
    return verdict


def _ask(probe: Probe) -> Verdict:
    exe = probe.executable()
    if exe is None:
        return Verdict([], failure=f"the trainer's interpreter {probe.interpreter!r} is not on its PATH here")
    from trainstack.upstream.plugin_contract import NO_GPU_ENV

    env = {**probe.env, **NO_GPU_ENV}
    request = {"path0": probe.path0, "prelude": probe.prelude, "plugins": list(probe.plugins),
               "group_rm": probe.group_rm}
    with tempfile.TemporaryDirectory(prefix="trainstack-probe-") as tmp:
        result = Path(tmp, "verdict.json")
        try:
            proc = subprocess.run([exe, str(CHILD), str(result)], input=json.dumps(request), cwd=probe.cwd, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Verdict([], failure=f"importing the plugins in the trainer's interpreter ({exe}) took over "
                                       f"{TIMEOUT_S:.0f} s (a module that starts work when imported?)")
        except OSError as ex:
            return Verdict([], failure=f"the trainer's interpreter {exe} could not be started: {ex.strerror or ex}")
        try:
            out = json.loads(result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
            return Verdict([], failure=f"the trainer's interpreter {exe} exited {proc.returncode} while importing "
                                       f"the plugins: {tail[0][:300]}")
    return Verdict(plugins=out.get("plugins", []), python=out.get("python", exe),
                   prelude_error=out.get("prelude_error"), files=out.get("files", []),
                   library_dirs=out.get("library_dirs", []))


# ------------------------------------------------------------------------------------------
# kept verdicts (only passing ones), valid while the files they imported are unchanged
# ------------------------------------------------------------------------------------------
def cache_dir() -> Path | None:
    from trainstack.storage.user_cache import cache_dir as user_cache_dir

    return user_cache_dir(CACHE_ENV, "plugin-verdicts")


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _stamps(v: Verdict) -> dict[str, list[int] | None]:
    return {p: _stamp(p) for p in [*v.files, *v.library_dirs]}


def _holds(stamps: dict[str, list[int] | None]) -> bool:
    return all(_stamp(p) == s for p, s in stamps.items())


def _keep(key: str, v: Verdict, stamps: dict[str, list[int] | None]) -> None:
    d = cache_dir()
    if d is None:
        return
    record = {"plugins": v.plugins, "python": v.python, "stamps": stamps}
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only home: probe again next time


def _kept(key: str) -> tuple[Verdict, dict[str, list[int] | None]] | None:
    d = cache_dir()
    if d is None:
        return None
    try:
        record = json.loads((d / f"{key}.json").read_text(encoding="utf-8"))
        stamps = record["stamps"]
        if not isinstance(stamps, dict) or not _holds(stamps):
            return None
        return Verdict(plugins=record["plugins"], python=record.get("python", "")), stamps
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _child_version() -> list[int] | None:
    return _stamp(str(CHILD))


# ------------------------------------------------------------------------------------------
# the verdict, told as config errors
# ------------------------------------------------------------------------------------------
def problems(facts: "HostFacts", plugins: list[tuple[str, str]], script: Path | None) -> list[ConfigError]:
    """ConfigErrors for the plugins the trainer could not import or slime could not call ([] when all pass)."""
    syntax = [(d, v, why) for d, v in plugins if (why := _syntax(v))]
    errors = [_error(facts, d, v, why, "write it as package.module.function") for d, v, why in syntax]
    asked = [(d, v) for d, v in plugins if not _syntax(v)]
    if not asked:
        return errors
    verdict = run(probe_for(facts, asked, script))
    first = asked[0][0]
    if verdict.failure:
        return errors + [_error(facts, first, asked[0][1], verdict.failure + "; the plugins could not be checked",
                                "run the trainer's interpreter by hand to see why (the command the dry run prints)")]
    if verdict.prelude_error is not None:
        e = verdict.prelude_error
        if e.get("type") == "SlimeMissing":  # no slime source at slime.root: the host check's slime.root error says
            return errors  # so, with the fix for this install (a clone, or the checkout's submodule)
        return errors + [_error(facts, first, asked[0][1], f"the trainer could not set up its imports before loading "
                                f"plugins: {e['type']}: {e['message']}", "see the message; for slime's own modules "
                                "fill the submodule (git submodule update --init slime)")]
    python = verdict.python or "the trainer's interpreter"
    for p in verdict.plugins:
        if p["verdict"] != "ok":
            errors.append(_plugin_error(facts, p, python))
    return errors


def _syntax(value: str) -> str:
    module, _, attr = value.rpartition(".")
    if not module or not attr or not all(part.isidentifier() for part in value.split(".")):
        return "not a dotted path package.module.name"
    return ""


def _error(facts: "HostFacts", dest: str, value: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(facts.key_of(dest), problem, fix, value=value, source=facts.source_of(dest))


def _plugin_error(facts: "HostFacts", p: dict[str, Any], python: str) -> ConfigError:
    dest, value, kind = p["dest"], p["value"], p["verdict"]
    module, _, attr = value.rpartition(".")
    key = facts.key_of(dest)
    if kind == "missing":
        new = renamed(value)
        if new:
            return _error(facts, dest, value, f"cannot import {value!r}: trainstack renamed its package", f"write {new}")
        where = shell_only_dir(value, facts.command.env.get("PYTHONPATH", ""))
        if where:
            return _error(facts, dest, value, f"the trainer cannot import {module!r}: it is in {where}, on your shell's "
                          "PYTHONPATH or the directory you launch from, which the trainer does not get (its "
                          "PYTHONPATH is the run's runtime env, shown by the dry run)",
                          f"add the directory to the run: runtime_env.pythonpath=[{where}]")
        err = p.get("error") or {}
        return _error(facts, dest, value, f"the trainer's interpreter ({python}) cannot import {module!r}: "
                      f"{err.get('type', 'ModuleNotFoundError')}: {err.get('message', '')}",
                      "write it as package.module.function, with the module on the trainer's PYTHONPATH "
                      "(runtime_env.pythonpath=[DIR] adds a directory) or installed in that interpreter")
    if kind == "import_error":
        err = p.get("error") or {}
        at = f" at {err['where']}" if err.get("where") else ""
        return _error(facts, dest, value, f"importing {module!r} in the trainer's interpreter ({python}) fails: "
                      f"{err.get('type')}: {err.get('message')}{at}",
                      "fix the module, or install what it imports in the trainer's interpreter")
    if kind == "no_attr":
        return _error(facts, dest, value, f"module {module!r} ({p.get('file')}) has no {attr!r}",
                      f"check the name, or define {attr} in that module")
    if kind == "gpu":
        from trainstack.upstream.plugin_contract import NO_GPU_SOURCE

        return _error(facts, dest, value, f"importing {module!r} initialises CUDA; slime imports plugins where no GPU "
                      f"may be visible (the rollout manager has none: {NO_GPU_SOURCE})",
                      "move the GPU work out of the module's top level (into the function)")
    sig = f" (its signature: {p['signature']})" if p.get("signature") else ""
    return ConfigError(key, f"{value} {'; and '.join(p.get('problems') or ['does not fit slime'])}{sig}",
                       _contract_fix(dest, facts, p.get("problems") or []), value=value, source=facts.source_of(dest))


def _contract_fix(dest: str, facts: "HostFacts", problems: list[str]) -> str:
    from trainstack.upstream.plugin_contract import contract_for

    c = contract_for(dest, bool(facts.args.get("group_rm")))
    if c is None:
        return "make it a function slime can call"
    how = {"async": "an `async def`", "sync": "a plain `def` (not async)", "class": "a class",
           "either": "a function"}[c.mode]
    fix = f"define it as {how} that slime can call as {c.call}"
    if dest == "custom_rm_path" and any("names its second parameter" in x for x in problems):
        other = "false" if facts.args.get("group_rm") else "true"
        fix += f", or set {facts.key_of('group_rm')}={other} if it is written for the other shape"
    return fix


def shell_only_dir(value: str, trainer_pythonpath: str) -> str:
    """The directory on the launching shell's PYTHONPATH (or the launch directory) that holds `value`'s
    module while the trainer's PYTHONPATH does not ("" when none does)."""
    theirs = set(p for p in trainer_pythonpath.split(os.pathsep) if p)
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [os.getcwd()]
    for d in dict.fromkeys(os.path.abspath(p) for p in ours):
        if d in theirs:
            continue
        if _defined_under(value, d):
            return d
    return ""


def _defined_under(value: str, root: str) -> bool:
    """Does `root` hold the module of `value` (found by its file, imported nowhere)?"""
    module, _, _ = value.rpartition(".")
    parts = module.split(".")
    base = Path(root, *parts)
    if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
        return False
    return locate(value, [root]) == ""
