"""Every check that can fail, run before anything is written, by the dry run and the launch alike.

A run that would fail does so before a run dir, a lease or a process exists, and a dry run
answers exactly like the launch (same errors, exit code 2). What is checked:

- the run directory's files are readable (a corrupt `args.json`, `lease.json`, ... is named);
- what relaunching would do (fresh, resume, finished; a changed training config is refused);
- the machine that runs the trainer (`host_problems`): the slime checkout, input paths of the
  right kind (data files, checkpoint directories), plugin modules (`pkg.module.fn`) that can be
  found without importing them, a writable `paths.runs_root` with room for one checkpoint;
- the tiny backend's own argv checks (features it does not implement, missing data).

For launchers whose trainer runs elsewhere (slurm, lium, ray_job with a remote address) the
host checks are listed as *deferred* by the dry run; `trainstack exec` runs them on that host
before the trainer starts (`check_stored`).
"""
from __future__ import annotations

import ast
import importlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun

# Data flags an env's `meta.prepare` hook may create at launch (the dry run does not run hooks).
PREPARED_DATA_FLAGS = ("--prompt-data", "--eval-prompt-data")
PREPARED_DATA_DESTS = ("prompt_data", "eval_prompt_data")

# Inputs the trainer reads, by the kind of filesystem object they must be.
INPUT_FILES = ("prompt_data", "custom_config_path", "eval_config", "megatron_config_path", "sglang_config")
INPUT_DIRS = ("hf_checkpoint", "ref_load", "critic_load", "opd_teacher_load")
INPUT_ANY = ("tokenizer_model",)
# slime dests that name a Python object (`pkg.module.attr`) slime imports; files are not plugins.
NOT_PLUGINS = frozenset({"custom_config_path", "megatron_config_path"})
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")

# Bytes one checkpoint takes per parameter: weights (bf16 for slime, fp32 for the tiny model)
# plus, unless --no-save-optim, fp32 master weights and Adam's two moments.
WEIGHT_BYTES = {"slime": 2, "tiny": 4}
OPTIMIZER_BYTES = {"slime": 12, "tiny": 8}


@dataclass
class HostFacts:
    """What the host checks read, from a resolved run (submit host) or a stored spec (exec)."""

    run_id: str
    run_dir: str
    backend: str
    launcher: str
    ray_address: str | None
    args: dict[str, Any]
    command: SlimeCommand
    params: int | None  # model parameters (model meta), for the checkpoint size
    key_of: Callable[[str], str] = lambda dest: f"args.{dest}"
    source_of: Callable[[str], str] = lambda dest: ""
    prepared_root: str | None = None  # an env data hook writes its files under here at launch

    def made_by_hook(self, path: str) -> bool:
        """A data file the env's `meta.prepare` hook will write (under data_root) before the trainer starts."""
        if not self.prepared_root:
            return False
        try:
            Path(path).resolve().relative_to(Path(self.prepared_root).resolve())
        except ValueError:
            return False
        return True

    @classmethod
    def from_run(cls, run: ResolvedRun, cmd: SlimeCommand) -> "HostFacts":
        return cls(run_id=run.run_id, run_dir=run.run_dir, backend=run.cluster.backend,
                   launcher=run.cluster.launcher, ray_address=run.cluster.ray_address, args=run.args, command=cmd,
                   params=_int_or_none((run.meta.get("model") or {}).get("params")), key_of=run.key,
                   source_of=run.source)

    @classmethod
    def from_spec(cls, spec: Any) -> "HostFacts":
        model = (spec.config.get("model") or {}) if isinstance(spec.config, dict) else {}
        return cls(run_id=spec.run_id, run_dir=spec.run_dir, backend=spec.cluster.backend,
                   launcher=spec.cluster.launcher, ray_address=spec.cluster.ray_address, args=dict(spec.args),
                   command=spec.slime_command(), params=_int_or_none((model.get("meta") or {}).get("params")),
                   source_of=lambda dest: spec.arg_sources.get(dest, ""))

    @property
    def runs_here(self) -> bool:
        """Does the trainer run on this machine (so its inputs must be here)?"""
        if self.launcher == "local":
            return True
        if self.launcher == "ray_job":
            return (urlparse(self.ray_address or "http://127.0.0.1:8265").hostname or "") in LOOPBACK
        return False


@dataclass
class Report:
    """What a dry run shows besides the command: where things are, what the launch would do."""

    runs_here: bool
    plan: str = ""  # what relaunching this run_id would do
    notes: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # checks the remote host runs before the trainer


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


# ------------------------------------------------------------------------------------------
# the env's data hook
# ------------------------------------------------------------------------------------------
def prepare_data(hook: str | None, data_root: str) -> None:
    """Call an env's `meta.prepare(data_root)` hook (e.g. write the arithmetic prompt files); idempotent."""
    if not hook:
        return
    module, _, fn = hook.rpartition(".")
    getattr(importlib.import_module(module), fn)(data_root)


def prepare_env_data(run: ResolvedRun) -> None:
    prepare_data(run.meta.get("env", {}).get("prepare"), run.paths.data_root)


# ------------------------------------------------------------------------------------------
# the whole preflight
# ------------------------------------------------------------------------------------------
def preflight(run: ResolvedRun, cmd: SlimeCommand, *, launching: bool, submitted_by: str | None = None) -> Report:
    """Raise ConfigErrors with everything that would stop this run; else what the dry run shows.
    A dry run trusts the env's data hook to create the files it names; a launch runs the hook only
    once everything else passed (so a refused launch writes nothing), then checks the data too.
    `submitted_by`: a Hydra launcher that submits the run elsewhere whatever its cluster says
    (`hydra/launcher=slurm`); it checks its own submit host."""
    from trainstack.launch import registry

    facts = HostFacts.from_run(run, cmd)
    if submitted_by:
        facts.launcher = submitted_by
    has_hook = bool(run.meta.get("env", {}).get("prepare"))
    facts.prepared_root = run.paths.data_root if has_hook else None
    report = Report(runs_here=facts.runs_here)
    corrupt = run_dir_problems(run)
    if corrupt:  # everything below reads the run dir: name the broken files first
        raise ConfigErrors(corrupt)
    errors = [] if submitted_by else registry.get(facts.launcher).submit_host_problems(dry=False)
    try:
        report.plan = _plan(run)
    except ConfigErrors as err:
        errors += err.errors
    if run.cluster.backend == "tiny":
        errors += _tiny_problems(run, cmd, facts)
    if facts.runs_here:
        errors += host_problems(facts)
    else:
        errors += runs_root_problems(facts, free_space=False)  # the submit host writes the run's spec there
        report.deferred = deferred_checks(facts)
    report.notes = checkout_notes(facts)
    errors = _dedupe(errors)
    if errors:
        raise ConfigErrors(errors)
    if launching and has_hook:
        prepare_env_data(run)
        facts.prepared_root = None  # written now: every input must exist
        errors = _tiny_problems(run, cmd, facts) if run.cluster.backend == "tiny" else []
        errors = _dedupe(errors + (host_problems(facts, only=PREPARED_DATA_DESTS) if facts.runs_here else []))
        if errors:
            raise ConfigErrors(errors)
    return report


def check_stored(spec: Any) -> None:
    """On the machine that executes a stored run (`trainstack exec`, a SLURM job): the host checks
    that the submit host deferred, before the lifecycle writes anything."""
    from trainstack.rundir import check

    facts = HostFacts.from_spec(spec)
    facts.launcher = "local"  # executing here: every input must be here
    facts.prepared_root = spec.data_root if spec.data_prepare else None  # the lifecycle runs the data hook
    errors = check.problems(spec.run_dir) + host_problems(facts)
    if errors:
        raise ConfigErrors(_dedupe(errors))


def _dedupe(errors: list[ConfigError]) -> list[ConfigError]:
    """One error per key for a missing input (the trainer's own check and the host check both see it)."""
    out: list[ConfigError] = []
    for e in errors:
        if any(o.key == e.key and (o.problem == e.problem or "on this machine" in e.problem) for o in out):
            continue
        out.append(e)
    return out


def run_dir_problems(run: ResolvedRun) -> list[ConfigError]:
    """Corrupt files in an existing run directory (read by the lifecycle before it starts anything)."""
    from trainstack.rundir import check

    d = Path(run.run_dir)
    if d.exists() and not d.is_dir():
        return [ConfigError("run_id", f"{d} exists and is not a directory, so it cannot be the run directory",
                            "move it aside or choose another run_id / paths.runs_root", value=run.run_id)]
    if not d.is_dir():
        return []
    return check.problems(d)  # a broken checkpoint tracker is the resume plan's to report


def _plan(run: ResolvedRun) -> str:
    from trainstack.resume import plan
    from trainstack.rundir import RunDir

    if not Path(run.run_dir).is_dir():
        return "fresh start (no run directory yet)"
    return plan(run, RunDir(run.run_dir)).describe()


# ------------------------------------------------------------------------------------------
# the machine that runs the trainer
# ------------------------------------------------------------------------------------------
def host_problems(facts: HostFacts, only: tuple[str, ...] | None = None) -> list[ConfigError]:
    """Checks about the machine the trainer runs on: slime checkout, inputs, plugins, runs_root."""
    errors: list[ConfigError] = []
    if only is None:
        errors += slime_checkout_problems(facts)
    errors += input_path_problems(facts, only=only)
    if only is None:
        errors += plugin_problems(facts)
        errors += runs_root_problems(facts, free_space=True)
    return errors


def slime_script(facts: HostFacts) -> Path | None:
    """The slime entrypoint a launch would start (`python3 <slime.root>/train.py`)."""
    if facts.backend != "slime":
        return None
    entry = facts.command.entrypoint
    return Path(entry[1]) if len(entry) > 1 else None


def slime_checkout_problems(facts: HostFacts) -> list[ConfigError]:
    script = slime_script(facts)
    if script is None or script.is_file():
        return []
    return [ConfigError("slime.root", f"the slime checkout this run uses has no {script.name}: {script} does not "
                        "exist on this machine, which is where the trainer would run",
                        "`git submodule update --init slime` in the trainstack checkout, or set "
                        "slime.root=/path/to/slime (or SLIME_ROOT); to only inspect the command use "
                        "`trainstack render ...`", value=str(script.parent))]


def checkout_notes(facts: HostFacts) -> list[str]:
    """The slime checkout a run will use, and whether this machine has it."""
    script = slime_script(facts)
    if script is None:
        return []
    here = "present on this machine" if script.is_file() else "NOT present on this machine"
    where = "" if facts.runs_here else f" (the {facts.launcher} host needs it, not this one)"
    return [f"slime checkout: {script.parent} ({script.name} {here}){where}; relative slime.root values are taken "
            "from the directory you launch in"]


def deferred_checks(facts: HostFacts) -> list[str]:
    """What the remote host checks before the trainer starts (`trainstack exec`)."""
    out = []
    script = slime_script(facts)
    if script is not None:
        out.append(f"slime checkout {script.parent} has {script.name}")
    for dest, kind, path in _inputs(facts):
        out.append(f"{facts.key_of(dest)}: {path} is a {kind}")
    for dest, value in _plugins(facts):
        out.append(f"{facts.key_of(dest)}: {value} can be imported")
    out.append(f"{facts.run_dir} is writable with room for one checkpoint")
    return out


def _inputs(facts: HostFacts) -> list[tuple[str, str, str]]:
    """(dest, "file" | "directory" | "file or directory", path) of every input path the args name."""
    out: list[tuple[str, str, str]] = []
    for dests, kind in ((INPUT_FILES, "file"), (INPUT_DIRS, "directory"), (INPUT_ANY, "file or directory")):
        for dest in dests:
            v = facts.args.get(dest)
            if isinstance(v, str) and v and "://" not in v:
                out.append((dest, kind, v))
    evals = facts.args.get("eval_prompt_data")
    if isinstance(evals, list):
        paths = evals if len(evals) == 1 else evals[1::2]
        out += [("eval_prompt_data", "file", p) for p in paths if isinstance(p, str) and "://" not in p]
    return out


def input_path_problems(facts: HostFacts, only: tuple[str, ...] | None = None) -> list[ConfigError]:
    errors = []
    for dest, kind, path in _inputs(facts):
        if only is not None and dest not in only:
            continue
        p = Path(path)
        if not p.exists() and dest in PREPARED_DATA_DESTS and facts.made_by_hook(path):
            continue
        if kind == "file" and p.is_file() or kind == "directory" and p.is_dir() or kind.startswith("file or") \
                and p.exists():
            continue
        what = "does not exist" if not p.exists() else f"is a {'directory' if p.is_dir() else 'file'}, not a {kind}"
        errors.append(ConfigError(facts.key_of(dest), f"{path} {what} on this machine (the trainer reads it here)",
                                  f"point {facts.key_of(dest)} at an existing {kind}, or create it",
                                  value=path, source=facts.source_of(dest)))
    return errors


def _plugins(facts: HostFacts) -> list[tuple[str, str]]:
    from trainstack.argtable import load_table

    table = load_table()
    out = []
    for dest, value in facts.args.items():
        spec = table.get(dest)
        if spec is None or spec.source != "slime" or not dest.endswith("_path") or dest in NOT_PLUGINS:
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v:
                out.append((dest, v))
    return out


def plugin_problems(facts: HostFacts) -> list[ConfigError]:
    """Plugin paths that cannot be found (module file and top-level name), without importing them:
    importing a user's module may start work, and slime's modules need GPUs."""
    errors = []
    script = slime_script(facts)
    roots = search_path(facts)
    for dest, value in _plugins(facts):
        if value.startswith("slime.") and script is not None and not script.is_file():
            continue  # the missing checkout is reported once
        why = locate(value, roots)
        if why:
            errors.append(ConfigError(facts.key_of(dest), f"cannot import {value!r}: {why}",
                                      "write it as package.module.function, with the module on the trainer's "
                                      "PYTHONPATH (runtime_env.pythonpath=[DIR] adds a directory)",
                                      value=value, source=facts.source_of(dest)))
    return errors


def search_path(facts: HostFacts) -> list[str]:
    """Where the trainer's Python looks for modules: its PYTHONPATH, its working directory (or the
    script's directory), then this interpreter's own path."""
    env_path = [p for p in facts.command.env.get("PYTHONPATH", "").split(":") if p]
    script = slime_script(facts)
    first = [str(script.parent)] if script is not None else [facts.command.cwd]
    return [*first, *env_path, *[p for p in sys.path if p]]


def locate(dotted: str, roots: list[str]) -> str:
    """Why `pkg.module.attr` cannot be imported ("" when its module file defines `attr`)."""
    module, _, attr = dotted.rpartition(".")
    if not module or not attr or not all(part.isidentifier() for part in dotted.split(".")):
        return "not a dotted path package.module.name"
    if module in sys.builtin_module_names:
        return ""
    parts = module.split(".")
    for root in roots:
        base = Path(root, *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return "" if _defines(candidate, attr) else f"{candidate} defines no {attr!r}"
        if base.is_dir() and ((base / f"{attr}.py").is_file() or (base / attr / "__init__.py").is_file()):
            return ""  # a namespace package holding a submodule named attr
        for ext in _extension_suffixes():
            if base.with_name(base.name + ext).is_file():
                return ""  # compiled: cannot look inside
    return f"no module {module!r} on the trainer's PYTHONPATH"


def _extension_suffixes() -> list[str]:
    import importlib.machinery

    return list(importlib.machinery.EXTENSION_SUFFIXES)


def _defines(path: Path, name: str) -> bool:
    """Does a module define `name` at top level (def, class, assignment, import; or export it
    dynamically with __getattr__ or a star import, which we then trust)?"""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return True  # the trainer's import will report it; we cannot tell
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in (name, "__getattr__"):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id == name:
                        return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name.split(".")[0]) == name:
                    return True
        if isinstance(node, (ast.If, ast.Try)):  # conditional definitions: trust them
            if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in ast.walk(node)):
                return True
            if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node)):
                return True
    return False


def checkpoint_bytes(facts: HostFacts) -> int | None:
    """How much one checkpoint of this run takes (None: model size unknown)."""
    if facts.params is None:
        return None
    per_param = WEIGHT_BYTES.get(facts.backend, 2)
    if not facts.args.get("no_save_optim"):
        per_param += OPTIMIZER_BYTES.get(facts.backend, 12)
    return facts.params * per_param


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def runs_root_problems(facts: HostFacts, *, free_space: bool) -> list[ConfigError]:
    """The run directory can be created and written, with room for one checkpoint."""
    run_dir = Path(facts.run_dir)
    runs_root = run_dir.parent
    base = _existing_ancestor(run_dir)
    key = "paths.runs_root"
    if not base.is_dir():
        return [ConfigError(key, f"{base} is a file, so {run_dir} cannot be created", "set paths.runs_root to a "
                            "directory (or a path where one can be created)", value=str(runs_root))]
    if not os.access(base, os.W_OK | os.X_OK) or _read_only(base):
        return [ConfigError(key, f"{base} is not writable, so {run_dir} cannot be created",
                            "set paths.runs_root to a writable directory", value=str(runs_root))]
    need = checkpoint_bytes(facts)
    if free_space and need is not None:
        free = shutil.disk_usage(base).free
        if free < need:
            return [ConfigError(key, f"{base} has {_size(free)} free; one checkpoint of this model takes about "
                                f"{_size(need)}", "free space there, or set paths.runs_root to a larger disk"
                                + ("" if facts.args.get("no_save_optim") else " (args.no_save_optim=true halves it "
                                   "and more: no optimizer state)"), value=str(runs_root))]
    return []


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# ------------------------------------------------------------------------------------------
# the tiny trainer's own checks
# ------------------------------------------------------------------------------------------
def _tiny_problems(run: ResolvedRun, cmd: SlimeCommand, facts: HostFacts) -> list[ConfigError]:
    """The tiny trainer's own parse and checks (a dry run trusts the data hook for the files it writes)."""
    from trainstack.tiny.cli import parse_argv
    from trainstack.tiny.validate import validate

    try:
        validate(parse_argv(cmd.argv), env=cmd.env)
    except ConfigErrors as err:
        errors = [e for e in err.errors if not (e.key in PREPARED_DATA_FLAGS and "does not exist" in e.problem
                                                and isinstance(e.value, str) and facts.made_by_hook(e.value))]
        return [_as_config_key(run, e) for e in errors]
    return []


def _as_config_key(run: ResolvedRun, error: ConfigError) -> ConfigError:
    """The trainer names flags (`--rm-type`); the user wrote a config key (`env.rm_type`)."""
    from dataclasses import replace

    from trainstack.argtable import load_table

    dest = load_table().flag_to_dest.get(error.key)
    if dest is None:
        return error
    return replace(error, key=run.key(dest), source=run.source(dest),
                   problem=f"{error.problem} ({error.key})" if error.key not in error.problem else error.problem)
