"""A run as a portable spec: resolved once on the submit host, executed as stored everywhere.

The spec (`spec.json` in the run dir) holds everything a machine needs to execute the run with no
recomposition: the rendered command (entrypoint, argv groups, env without secrets, cwd), the
resolved args (for the resume check), the resume, cluster and data settings, the config tree,
choices and overrides (for diff/compare/status), and where it was made (trainstack version, git
SHA and dirty flag, slime commit of the argument table, host, time). Editing `conf/` or the code
after submitting never changes a submitted run. Secrets never enter it: they come from the
executing machine's environment.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import os
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainstack import secrets
from trainstack.config.input_identity import inputs_of
from trainstack.config.schema import ClusterSpec, HubSpec, ResumeSpec
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.storage import layout

if TYPE_CHECKING:
    from trainstack.config.resolve import ResolvedRun
    from trainstack.render.command import SlimeCommand

# Bump when a field changes meaning or a required field is added; `exec` refuses newer specs.
SPEC_VERSION = 1
# Oldest spec this trainstack executes.
MIN_SPEC_VERSION = 1


@dataclass
class Provenance:
    """Where and from what a spec was made."""

    trainstack_version: str
    git_sha: str | None
    git_dirty: bool | None
    slime_commit: str
    host: str
    created_at: str
    cwd: str


@dataclass
class RunSpec:
    """Everything needed to execute one run, with no access to the config tree that made it."""

    run_id: str
    name: str
    run_dir: str
    launcher: str
    command: dict[str, Any]  # SlimeCommand fields; env without secrets
    args: dict[str, Any]  # resolved slime dests (secrets redacted): the resume check compares these
    arg_sources: dict[str, str]  # dest -> where its value came from
    resume: ResumeSpec
    cluster: ClusterSpec
    data_prepare: str | None  # env meta.prepare hook (dotted path), called with data_root before starting
    data_root: str
    config: dict[str, Any]  # the resolved config tree (secrets redacted)
    choices: dict[str, Any]
    overrides: list[str]  # as typed (secret values redacted)
    provenance: Provenance
    spec_version: int = SPEC_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # launcher facts (e.g. a SLURM job) added later
    inputs: dict[str, Any] = field(default_factory=dict)  # input dest -> path + content fingerprint (identity.py)
    hub: HubSpec = field(default_factory=HubSpec)  # Hub sync and restore (docs/hub.md); absent in older specs

    # --- made from a resolved run ---------------------------------------------------------
    @classmethod
    def from_run(cls, run: "ResolvedRun", cmd: "SlimeCommand") -> "RunSpec":
        command = dataclasses.asdict(cmd)
        command["env"] = secrets.public_env(cmd.env)
        return cls(run_id=run.run_id, name=run.name, run_dir=str(Path(run.run_dir).resolve()),
                   launcher=run.cluster.launcher, command=command, args=secrets.redact(run.args),
                   arg_sources=dict(run.provenance), resume=run.resume, cluster=run.cluster,
                   data_prepare=run.meta.get("env", {}).get("prepare"), data_root=run.paths.data_root,
                   config=secrets.redact(run.config), choices=dict(run.origin.choices),
                   overrides=[secrets.redact_override(o.lstrip("+")) for o in run.origin.overrides],
                   provenance=make_provenance(cmd.meta.get("slime_commit", ""), run.origin.cwd),
                   inputs=inputs_of(run.args), hub=run.hub)

    # --- what the lifecycle reads ---------------------------------------------------------
    def slime_command(self) -> "SlimeCommand":
        from trainstack.render.command import SlimeCommand

        known = {f.name for f in dataclasses.fields(SlimeCommand)}
        return SlimeCommand(**{k: v for k, v in self.command.items() if k in known})

    # --- storage --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> "RunSpec":
        """Refuse, naming the file and the fix, anything this version cannot execute as stored."""
        if not isinstance(data, dict) or "spec_version" not in data:
            raise _unreadable(where, "it is not a trainstack run spec (no spec_version)",
                              "relaunch the run from its config (python run.py ... run_id=<id>)")
        version = data["spec_version"]
        if not isinstance(version, int) or version > SPEC_VERSION:
            raise _unreadable(where, f"it was written by a newer trainstack (spec version {version}; this trainstack "
                              f"{_version()} executes versions {MIN_SPEC_VERSION}..{SPEC_VERSION})",
                              "upgrade trainstack on this machine to the version that submitted the run "
                              f"({data.get('provenance', {}).get('trainstack_version', '?')})")
        if version < MIN_SPEC_VERSION:
            raise _unreadable(where, f"spec version {version} is older than this trainstack executes "
                              f"({MIN_SPEC_VERSION}..{SPEC_VERSION})", "relaunch the run from its config")
        why = _shape_problem(data)
        if why:
            raise _unreadable(where, f"a field is missing or malformed ({why})",
                              "restore the file from a copy, or relaunch the run from its config")
        try:
            fields = {f.name for f in dataclasses.fields(cls)}
            values = {k: v for k, v in data.items() if k in fields}
            values["resume"] = ResumeSpec(**values["resume"])
            values["cluster"] = ClusterSpec(**values["cluster"])
            values["provenance"] = Provenance(**values["provenance"])
            if "hub" in values:
                values["hub"] = HubSpec(**values["hub"])
            return cls(**values)
        except (KeyError, TypeError) as ex:
            raise _unreadable(where, f"a field is missing or malformed ({ex})",
                              "restore the file from a copy, or relaunch the run from its config") from None

    def write(self, run_dir: str | Path | None = None) -> Path:
        from trainstack.storage.files import atomic_write

        path = Path(run_dir or self.run_dir) / layout.SPEC
        atomic_write(path, json.dumps(self.to_json(), indent=1, sort_keys=True, default=str) + "\n")
        return path


def load(run_dir: str | Path) -> RunSpec:
    path = Path(run_dir) / layout.SPEC
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _unreadable(str(path), "there is no stored spec in this run directory (it was made by an older "
                          "trainstack, or never submitted)", "relaunch it from its config: python run.py ... "
                          f"run_id={Path(run_dir).name}") from None
    except (OSError, ValueError) as ex:
        raise _unreadable(str(path), f"it cannot be read ({ex})", "restore the file, or relaunch from the config") \
            from None
    return rebase(RunSpec.from_json(data, str(path)), Path(run_dir), str(path))


def rebase(spec: RunSpec, here: Path, where: str = "") -> RunSpec:
    """The spec of the run dir `here`: a moved or copied run dir is that run, so every path under the
    directory the spec was written in moves to `here` (checkpoints, logs, tensorboard: exec writes
    where it is told). A copy whose original is being run right now is refused: two trainers of one
    run id would write two histories."""
    old, new = spec.run_dir.rstrip("/"), str(here.resolve())
    if not old or old == new:
        return spec
    busy = "" if _same_dir(old, new) else _live_lease(Path(old))  # one dir by two paths (a bind mount): no copy
    if busy:
        raise ConfigErrors([ConfigError(where or str(here / layout.SPEC), f"this run dir is a copy of {old}, which is "
                                        f"being run right now ({busy}); running the copy too would train one run "
                                        "twice", f"wait for it or stop it (trainstack cancel {old}), then exec the "
                                        f"copy; or run the original (trainstack exec {old})")])

    def move(v: Any) -> Any:
        if isinstance(v, str):
            return new + v[len(old):] if v == old or v.startswith(old + "/") else v
        if isinstance(v, list):
            return [move(x) for x in v]
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v

    return dataclasses.replace(spec, run_dir=new, command=move(spec.command), args=move(spec.args),
                               config=move(spec.config), inputs=move(spec.inputs))


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _live_lease(run_dir: Path) -> str:
    """Who holds the lease of `run_dir` right now ("" when nobody does, or it cannot be read)."""
    from trainstack.fencing.lease import LeaseRecord, is_stale

    try:
        data = json.loads((run_dir / layout.LEASE).read_text(encoding="utf-8"))
        names = {f.name for f in dataclasses.fields(LeaseRecord)}
        record = LeaseRecord(**{k: v for k, v in data.items() if k in names})
        return "" if is_stale(record) else record.describe()
    except (OSError, ValueError, TypeError, AttributeError):
        return ""


# Top-level fields and the JSON types they hold (nested settings are checked against their schema).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "name": (str,), "run_dir": (str,), "launcher": (str,), "command": (dict,), "args": (dict,),
    "arg_sources": (dict,), "resume": (dict,), "cluster": (dict,), "data_prepare": (str, type(None)),
    "data_root": (str,), "config": (dict,), "choices": (dict,), "overrides": (list,), "provenance": (dict,),
    "extra": (dict,),
}
_COMMAND_TYPES: dict[str, tuple[type, ...]] = {"entrypoint": (list,), "groups": (dict,), "env": (dict,), "cwd": (str,),
                                               "backend": (str,)}


def _shape_problem(data: dict) -> str:
    """The first field whose JSON type is not what this trainstack executes ("" when all are)."""
    from trainstack.config.schema import to_typed

    for key, kinds in _FIELD_TYPES.items():
        if key in data and not isinstance(data[key], kinds):
            return f"{key} is {type(data[key]).__name__}"
    command = data.get("command") or {}
    for key, kinds in _COMMAND_TYPES.items():
        if key in command and not isinstance(command[key], kinds):
            return f"command.{key} is {type(command[key]).__name__}"
    if not all(isinstance(t, str) for t in command.get("entrypoint") or []) or not all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in (command.get("groups") or {}).values()):
        return "command.entrypoint and command.groups must hold strings"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in (command.get("env") or {}).items()):
        return "command.env must map names to strings"
    if not all(isinstance(o, str) for o in data.get("overrides") or []):
        return "overrides must be strings"
    for key, cls in (("resume", ResumeSpec), ("cluster", ClusterSpec)):
        if isinstance(data.get(key), dict):
            _, errors = to_typed(cls, data[key], f"{key}.", lambda _k: "")
            if errors:
                return f"{errors[0].key}: {errors[0].problem}"
    return ""


def _unreadable(where: str, problem: str, fix: str) -> ConfigErrors:
    return ConfigErrors([ConfigError("run spec", problem, fix, source=where)])


def _version() -> str:
    from trainstack import __version__

    return __version__


def _git(cwd: Path, *argv: str) -> str | None:
    try:
        out = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def checkout_state() -> tuple[str | None, bool | None]:
    """(git SHA, dirty) of the checkout trainstack runs from; (None, None) when pip-installed.

    Asked once per process: three `git` subprocesses cost ~20 ms, which a 256-point sweep paid
    per point. The code a process runs cannot change under it, so the first answer holds; a
    dirty flag taken at the start of a sweep is the state its points were made from."""
    package = Path(__file__).resolve().parents[1]
    found = (_git(package, "rev-parse", "--show-toplevel", "HEAD") or "").splitlines()  # one git for both
    in_checkout = len(found) == 2 and Path(found[0]).resolve() == package.parent
    sha = found[1] if in_checkout else None
    dirty = None if sha is None else bool(_git(package, "status", "--porcelain", "--untracked-files=no"))
    return sha, dirty


_ASKED: list[Any] = []  # the thread of `ask_git_early`, joined before the answer is read


def ask_git_early() -> None:
    """Start `checkout_state`'s git calls in a thread (once per process): a launch composes and checks its
    run meanwhile, so the ~10 ms of git are off its path."""
    if not _ASKED:
        import threading

        thread = threading.Thread(target=checkout_state, name="trainstack-git", daemon=True)
        _ASKED.append(thread)
        thread.start()


def make_provenance(slime_commit: str, cwd: str) -> Provenance:
    """The checkout trainstack runs from (a pip-installed trainstack has no git: None)."""
    for thread in _ASKED:
        thread.join()
    sha, dirty = checkout_state()
    return Provenance(trainstack_version=_version(), git_sha=sha, git_dirty=dirty, slime_commit=slime_commit,
                      host=socket.gethostname(),
                      created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), cwd=cwd)

