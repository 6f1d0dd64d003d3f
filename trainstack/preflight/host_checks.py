"""The machine that runs the trainer: what it must have before anything is written or started.

The slime checkout the command names, its input paths (data files, checkpoint directories) of the
right kind, its plugin modules (`pkg.module.fn`), and a writable run directory with room for one
checkpoint. `HostFacts` carries what these checks read, from a resolved run (the submit host) or a
stored spec (`trainstack exec` on the host that executes it). Used by `trainstack/preflight/checks.py`.
"""
from __future__ import annotations

import os
import sys
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trainstack.upstream import slime_root
from trainstack.rules.context_length import hf_config_problems
from trainstack.errors import ConfigError
from trainstack.rules.plugin_paths import locate
from trainstack.render.command import SlimeCommand
from trainstack.config.resolve import ResolvedRun
from trainstack.upstream.select import checkout_problems, table_label
from trainstack.upstream.versions import pin


# Data paths an env's `meta.prepare` hook writes at launch (under data_root).
PREPARED_DATA_DESTS = ("prompt_data", "eval_prompt_data", "hf_checkpoint")  # hf_checkpoint: a tokenizer dir (cpu-agentic)
# Inputs the trainer reads, by the kind of filesystem object they must be.
INPUT_FILES = ("prompt_data", "custom_config_path", "eval_config", "megatron_config_path", "sglang_config")
INPUT_DIRS = ("hf_checkpoint", "ref_load", "opd_teacher_load")
INPUT_ANY = ("tokenizer_model",)
# slime dests that name a Python object (`pkg.module.attr`) slime imports; files are not plugins.
NOT_PLUGINS = frozenset({"custom_config_path", "megatron_config_path"})

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
    launcher_settings: dict[str, Any]  # cluster.<launcher> (the launcher decides whether the trainer runs here)
    args: dict[str, Any]
    command: SlimeCommand
    params: int | None  # model parameters (model meta), for the checkpoint size
    key_of: Callable[[str], str] = lambda dest: f"args.{dest}"
    source_of: Callable[[str], str] = lambda dest: ""
    prepared_root: str | None = None  # an env data hook writes its files under here at launch
    prepared: frozenset[str] = frozenset()  # paths a feature prepares at launch (hooks.PREPARED_PATHS)
    prepare_hook: str | None = None  # env.meta.prepare: the launcher (or exec host) imports and calls it

    def made_by_hook(self, path: str) -> bool:
        """A data file the env's `meta.prepare` hook will write (under data_root) before the trainer starts."""
        if path in self.prepared:
            return True
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
                   launcher=run.cluster.launcher, launcher_settings=run.cluster.settings, args=run.args, command=cmd,
                   params=_int_or_none((run.meta.get("model") or {}).get("params")), key_of=run.key,
                   source_of=run.source, prepared=_prepared(run.config, run.args),
                   prepare_hook=(run.meta.get("env") or {}).get("prepare"))

    @classmethod
    def from_spec(cls, spec: Any) -> "HostFacts":
        model = (spec.config.get("model") or {}) if isinstance(spec.config, dict) else {}
        return cls(run_id=spec.run_id, run_dir=spec.run_dir, backend=spec.cluster.backend,
                   launcher=spec.cluster.launcher, launcher_settings=spec.cluster.settings, args=dict(spec.args),
                   command=spec.slime_command(), params=_int_or_none((model.get("meta") or {}).get("params")),
                   source_of=lambda dest: spec.arg_sources.get(dest, ""), prepared=_prepared(spec.config, spec.args),
                   prepare_hook=getattr(spec, "data_prepare", None))

    @property
    def runs_here(self) -> bool:
        """Does the trainer run on this machine (so its inputs must be here)?"""
        from trainstack.registry import launcher_class

        return launcher_class(self.launcher).runs_here(self.launcher_settings or {})


def _prepared(config: Any, args: Any) -> frozenset[str]:
    from trainstack import hooks

    if not isinstance(config, dict):
        return frozenset()
    return frozenset(p for prepared in hooks.get(hooks.PREPARED_PATHS) for p in prepared(config, args))


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def host_problems(facts: HostFacts, only: tuple[str, ...] | None = None) -> list[ConfigError]:
    """Checks about the machine the trainer runs on: slime checkout, inputs, plugins, runs_root."""
    errors: list[ConfigError] = []
    if only is None:
        errors += backend_extra_problems(facts)
        errors += slime_checkout_problems(facts)
    errors += input_path_problems(facts, only=only)
    if only is None:
        errors += plugin_problems(facts)
        errors += hf_config_problems(facts)
        errors += runs_root_problems(facts, free_space=True)
        errors += prepared_root_problems(facts)
        errors += checkpoint_read_problems(facts)
    return errors


def backend_extra_problems(facts: HostFacts) -> list[ConfigError]:
    """A trainer that runs in this Python (the tiny one) needs its extra's modules installed here."""
    from trainstack.config.backends import BACKENDS
    from trainstack.extras import problem

    backend = BACKENDS.get(facts.backend)
    if backend is None or backend.extra is None:
        return []
    errors = problem("cluster.backend", backend.extra, f"the {backend.name} backend (the CPU trainer and slime's "
                     "rollout code)", backend.imports, value=backend.name)
    if facts.args.get("use_wandb"):  # the trainer logs to W&B itself (trainstack/tiny/metrics.py)
        errors += problem(facts.key_of("use_wandb"), "wandb", "W&B logging", value=True)
    return errors


def slime_checkout(facts: HostFacts) -> tuple[Path, Path] | None:
    """(the slime checkout a launch uses, the file it needs there): slime's entrypoint
    (`python3 <slime.root>/train.py`), or for a trainstack trainer the `slime` package it imports
    (`$TRAINSTACK_SLIME_ROOT`, set from slime.root: trainstack/upstream/slime_root.py)."""
    if facts.backend == "slime":
        entry = facts.command.entrypoint
        return (Path(entry[1]).parent, Path(entry[1])) if len(entry) > 1 else None
    root = facts.command.env.get(slime_root.ENV)
    return (Path(root), Path(root).joinpath(*slime_root.SOURCE_MARK)) if root else None


def slime_script(facts: HostFacts) -> Path | None:
    """The slime entrypoint a launch would start (`python3 <slime.root>/train.py`)."""
    found = slime_checkout(facts) if facts.backend == "slime" else None
    return found[1] if found else None


def slime_checkout_problems(facts: HostFacts) -> list[ConfigError]:
    """The checkout has what the trainer needs and is at the commit the argument table was read from."""
    found = slime_checkout(facts)
    if found is None:
        return []
    root, needed = found
    if needed.is_file():
        # slime's own files identify the version (trainstack/upstream/select.py); the flags are checked against
        # a slime entrypoint's table (the tiny trainer has flags of its own: it parses them itself)
        flags = [t for t in facts.command.argv if t.startswith("--")] if facts.backend == "slime" else []
        errors = checkout_problems(root, flags)
        return errors or (real_parse_problems(facts, root) if facts.backend == "slime" else [])
    what = "the trainer would start" if facts.backend == "slime" else "the CPU backend runs slime's rollout code from"
    return [ConfigError("slime.root", f"the slime checkout this run uses has no {needed.relative_to(root)}: {needed} "
                        f"does not exist on this machine, which is where the trainer would run ({what} it)",
                        slime_root.fetch_fix(root, pinned_commit()) + "; to only inspect the command use `trainstack "
                        "render ...`", value=str(root))]


def _trainer_pythonpath(facts: HostFacts) -> list[str]:
    return [p for p in facts.command.env.get("PYTHONPATH", "").split(os.pathsep) if p]


def real_parse_problems(facts: HostFacts, root: Path) -> list[ConfigError]:
    """slime's own parse_args on the final argv, where Megatron and SGLang are importable (the trainer's host)."""
    from trainstack.upstream import realparse

    if not realparse.stack_present(root, _trainer_pythonpath(facts)):
        return []
    return realparse.problems(root, facts.command.argv, facts.command.env, table_label())


def checkout_notes(facts: HostFacts) -> list[str]:
    """The slime checkout a run will use, and whether this machine has it."""
    found = slime_checkout(facts)
    if found is None:
        return []
    root, needed = found
    here = "present on this machine" if needed.is_file() else "NOT present on this machine"
    where = "" if facts.runs_here else f" (the {facts.launcher} host needs it, not this one)"
    notes = [f"slime checkout: {root} ({needed.relative_to(root)} {here}){where}; relative slime.root values are "
             "taken from the directory you launch in"]
    if needed.is_file() and facts.backend == "slime":
        from trainstack.upstream.realparse import stack_present

        notes.append("slime's own parser checks the command here (Megatron and SGLang importable)"
                     if stack_present(root, _trainer_pythonpath(facts)) else
                     f"slime's parser stack (Megatron-LM, SGLang) is not installed here: the command is checked "
                     f"against trainstack's table for {table_label()}; `trainstack exec` on the trainer's host runs "
                     "slime's own parser")
    return notes


def deferred_checks(facts: HostFacts) -> list[str]:
    """What the remote host checks before the trainer starts (`trainstack exec`)."""
    out = []
    found = slime_checkout(facts)
    if found is not None:
        root, needed = found
        out.append(f"slime checkout {root} has {needed.relative_to(root)}")
        out.append(f"slime checkout {root} is a slime version trainstack knows (by the content of its "
                   f"argument files)" + (f" and has every flag of the command (rendered for {table_label()})"
                                         if facts.backend == "slime" else ""))
    for dest, kind, path in _inputs(facts):
        out.append(f"{facts.key_of(dest)}: {path} is a {kind}")
    for dest, value in _plugins(facts):
        out.append(f"{facts.key_of(dest)}: {value} imports in the trainer's interpreter and fits slime's call")
    if found is not None and facts.backend == "slime" and facts.args.get("hf_checkpoint"):
        out.append(f"{facts.key_of('hf_checkpoint')}: the model's context (config.json) fits the response budgets")
    if facts.prepare_hook:
        out.append(f"env.meta.prepare: {facts.prepare_hook} can be imported")
    out.append(f"{facts.run_dir} is writable with room for one checkpoint")
    return out


def _inputs(facts: HostFacts) -> list[tuple[str, str, str]]:
    """(dest, "file" | "directory" | "file or directory", path) of every input path the args name."""
    out: list[tuple[str, str, str]] = []
    for dests, kind in ((INPUT_FILES, "file"), (INPUT_DIRS, "directory"), (INPUT_ANY, "file or directory")):
        for dest in dests:
            v = facts.args.get(dest)
            if facts.source_of(dest).startswith("trainstack"):  # a file the launch writes (an HTTP env's settings)
                continue
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
        try:
            exists, is_file, is_dir = p.exists(), p.is_file(), p.is_dir()
        except OSError as ex:  # a name too long, a path through a file: not a usable path
            errors.append(ConfigError(facts.key_of(dest), f"{path[:200]} is not a usable path ({ex.strerror})",
                                      f"point {facts.key_of(dest)} at an existing {kind}", value=path[:200],
                                      source=facts.source_of(dest)))
            continue
        if not exists and (dest in PREPARED_DATA_DESTS and facts.made_by_hook(path) or path in facts.prepared):
            continue
        if kind == "file" and is_file or kind == "directory" and is_dir or kind.startswith("file or") and exists:
            continue
        what = "does not exist" if not exists else f"is a {'directory' if is_dir else 'file'}, not a {kind}"
        errors.append(ConfigError(facts.key_of(dest), f"{path} {what} on this machine (the trainer reads it here)",
                                  f"point {facts.key_of(dest)} at an existing {kind}, or create it",
                                  value=path, source=facts.source_of(dest)))
    return errors


def _plugins(facts: HostFacts) -> list[tuple[str, str]]:
    from trainstack.upstream.argtable import load_table

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
    """Plugins the trainer's own interpreter cannot import, with the trainer's PYTHONPATH and environment,
    or that slime cannot call as it does (trainstack/preflight/plugin_probe.py)."""
    from trainstack.preflight.plugin_probe import problems

    script = slime_script(facts)
    plugins = [(dest, value) for dest, value in _plugins(facts)
               if not (value.startswith("slime.") and script is not None and not script.is_file())]  # reported once
    errors = problems(facts, plugins, script) if plugins else []
    if facts.prepare_hook:  # run by the launcher (or the exec host) in its own interpreter, before the trainer
        why = locate(facts.prepare_hook, [os.getcwd(), *[p for p in sys.path if p]])
        if why:
            errors.append(ConfigError("env.meta.prepare", f"cannot import {facts.prepare_hook!r}: {why}",
                                      "write it as package.module.function, importable where trainstack runs (it "
                                      "calls the hook with the data root before the trainer starts)",
                                      value=facts.prepare_hook))
    return errors


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
    loop = _broken_link(run_dir)
    if loop is not None:
        return [ConfigError(key, f"{loop} is a symbolic link that leads nowhere (a loop, or a missing target)",
                            "point paths.runs_root at a real directory, or fix the link", value=str(runs_root))]
    if not base.is_dir():
        return [ConfigError(key, f"{base} is a file, so {run_dir} cannot be created", "set paths.runs_root to a "
                            "directory (or a path where one can be created)", value=str(runs_root))]
    from trainstack.storage import layout

    for name in (layout.LOGS, layout.CHECKPOINTS, layout.TENSORBOARD):  # a run dir's own folders
        sub = run_dir / name
        if sub.exists() and not sub.is_dir():
            return [ConfigError(str(sub), f"is a file where the run keeps its {name} directory",
                                f"move it aside (mv {sub} {sub}.bak); trainstack recreates the directory",
                                value=str(sub))]
    if not os.access(base, os.W_OK | os.X_OK) or _read_only(base):
        return [ConfigError(key, f"{base} is not writable, so {run_dir} cannot be created",
                            "set paths.runs_root to a writable directory", value=str(runs_root))]
    for sub in (run_dir / layout.CHECKPOINTS, run_dir / layout.LOGS):  # a run dir's own folders, on their own mounts
        if sub.is_dir() and (_read_only(sub) or not os.access(sub, os.W_OK | os.X_OK)):
            import errno

            from trainstack.storage.faults import fix_for

            ro = _read_only(sub)
            why = "is on a read-only filesystem" if ro else "is not writable here (permission denied)"
            kind = OSError(errno.EROFS if ro else errno.EACCES, why, str(sub))
            return [ConfigError(str(sub), f"{why}: the run writes its checkpoints and logs there",
                                fix_for(kind, str(sub), "then launch again"), value=str(sub))]
    need = checkpoint_bytes(facts)
    if free_space and need is not None:
        free = shutil.disk_usage(base).free
        if free < need:
            return [ConfigError(key, f"{base} has {_size(free)} free; one checkpoint of this model takes about "
                                f"{_size(need)}", "free space there, or set paths.runs_root to a larger disk"
                                + ("" if facts.args.get("no_save_optim") else " (args.no_save_optim=true halves it "
                                   "and more: no optimizer state)"), value=str(runs_root))]
    return []


def _broken_link(path: Path) -> Path | None:
    """The first component of `path` that is a symbolic link to nowhere (a loop or a missing target)."""
    for p in reversed((path, *path.parents)):
        if p.is_symlink() and not p.exists():
            return p
    return None


def checkpoint_read_problems(facts: HostFacts) -> list[ConfigError]:
    """The checkpoint a resume loads must be readable here: the completeness test reads sizes only,
    and an unreadable file would fail the trainer with a traceback after the launch."""
    from trainstack.storage.checkpoints import inspect
    from trainstack.storage import layout

    save = str(facts.args.get("load") or Path(facts.run_dir) / layout.CHECKPOINTS)
    latest = inspect(save).latest_complete
    if latest is None:
        return []
    iter_dir = Path(save) / layout.iter_name(latest)
    for dirpath, dirnames, filenames in os.walk(iter_dir):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
                return [ConfigError(str(p), "cannot be read here (permission denied): resuming loads it",
                                    f"make it readable (chmod -R u+rX {iter_dir}), or move {iter_dir} aside to "
                                    "resume from the checkpoint before it", value=str(p))]
    return []


def prepared_root_problems(facts: HostFacts) -> list[ConfigError]:
    """The env's data hook writes under paths.data_root at launch: it must be (or become) a writable
    directory, not a file or a read-only place."""
    if not facts.prepared_root:
        return []
    root = Path(facts.prepared_root)
    key, fix = "paths.data_root", "set paths.data_root to a writable directory (or a path where one can be created)"
    loop = _broken_link(root)
    if loop is not None:
        return [ConfigError(key, f"{loop} is a symbolic link that leads nowhere (a loop, or a missing target)", fix,
                            value=str(root))]
    base = _existing_ancestor(root)
    if not base.is_dir():
        return [ConfigError(key, f"{base} is a file, so the env's data cannot be written under {root}", fix,
                            value=str(root))]
    from trainstack.terminal.output_files import cannot_create_in

    why = "not writable" if not os.access(base, os.W_OK | os.X_OK) or _read_only(base) else cannot_create_in(base)
    if why:
        return [ConfigError(key, f"{base}: {why}, so the env's data cannot be written under {root}", fix,
                            value=str(root))]
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


def pinned_commit() -> str:
    """The slime commit trainstack's packaged table was read from (the fix's `git checkout`)."""
    return pin().commit
