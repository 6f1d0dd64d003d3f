"""One import: read the script, plan the experiment, render it from a scratch copy, compare, write.

Nothing is written until the experiment has rendered: bad input (no such file, not a launch script,
a line import cannot read, a value it cannot know) and an experiment trainstack's checks refuse are
ConfigErrors, and the config dir is left as it was.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.script_import import flags, plan, proof
from trainstack.script_import.shell import Reading, ScriptError, describe_all, read_script


@dataclass
class Result:
    script: Path
    target: Path
    plan: plan.Plan
    proof: proof.Proof
    text: str
    notes: list[str] = field(default_factory=list)
    written: bool = False


def default_slime_root() -> Path | None:
    from trainstack.config.resolve import PROJECT_ROOT

    root = os.environ.get("SLIME_ROOT")
    path = Path(root) if root else PROJECT_ROOT / "slime"
    return path.resolve() if path.is_dir() else None


def checkout_of(script: Path) -> Path | None:
    """The slime checkout a script sits in (a directory above it with train.py and scripts/models/)."""
    for parent in script.parents:
        if (parent / "train.py").is_file() and (parent / "scripts" / "models").is_dir():
            return parent
    return None


def locate(script: str, slime_root: Path | None) -> Path:
    """The script as given, else (a relative path) inside the slime checkout: `scripts/run-qwen3-4B.sh`."""
    path = Path(script).expanduser()
    if path.is_file():
        return path.resolve()
    if not path.is_absolute() and slime_root is not None and (slime_root / path).is_file():
        return (slime_root / path).resolve()
    where = f" (nor under the slime checkout {slime_root})" if slime_root is not None and not path.is_absolute() else ""
    what = "is a directory" if path.is_dir() else f"does not exist{where}"
    raise ConfigErrors([ConfigError("script", f"{script} {what}", "give the path of a slime launch script "
                                    "(run-*.sh), or one relative to the slime checkout (scripts/run-qwen3-4B.sh)",
                                    value=script)])


def parse_env(pairs: list[str]) -> dict[str, str]:
    import re

    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ConfigErrors([ConfigError("--env", f"`{pair}` is not NAME=VALUE", "e.g. --env BASE_DIR=/data",
                                            value=pair)])
        out[name] = value
    return out


def _error(script: Path, ex: ScriptError) -> ConfigError:
    path = ex.path or script
    where = f"{path}:{ex.line}" if ex.line else str(path)
    return ConfigError(where, ex.message, ex.fix)


@dataclass
class Draft:
    """A script read and planned, not yet rendered."""

    script: Path
    reading: Reading
    parsed: flags.Parsed
    plan: plan.Plan
    target: Path
    text: str


def draft(script: Path, config_dir: Path | None, *, name: str | None = None, env: dict[str, str] | None = None,
          slime_root: Path | None = None, force: bool = False) -> Draft:
    """Read the script and plan its experiment; ConfigErrors for whatever stops that (nothing written)."""
    from trainstack.config.resolve import CONF_DIR
    from trainstack.secrets import is_secret_name

    try:
        reading = read_script(script, env or {}, slime_root)
    except ScriptError as ex:
        raise ConfigErrors([_error(script, ex)]) from None
    parsed = flags.parse(reading.launch.argv)
    errors = [ConfigError(f"{script}:{p.line}", p.message, p.fix, value=p.value) for p in parsed.problems]
    by_cause: dict[tuple, list[flags.Flag]] = {}
    for dest, flag in parsed.unknown.items():
        if dest in plan.CHECKPOINT_DESTS or is_secret_name(dest):
            continue  # trainstack replaces them: their values do not matter
        causes = tuple(sorted({(m.kind, m.what) for m in flag.marks if m.kind in ("env", "cmd", "expansion")}))
        by_cause.setdefault(causes, []).append(flag)
    for group in by_cause.values():  # one message per unknown thing, naming every flag it reaches
        unknown = sorted({m for f in group for m in f.marks if m.kind in ("env", "cmd", "expansion")},
                         key=lambda m: (m.line, m.what))
        seen = describe_all(unknown)
        values = "; ".join(f"{f.option} {' '.join(f.tokens)} (line {f.line})" for f in group)
        errors.append(ConfigError(f"{script}:{group[0].line}", f"import cannot know {values}: "
                                  f"{'it depends' if len(group) == 1 else 'they depend'} on {seen}",
                                  flags.fix_for(unknown)))
    where = (config_dir or CONF_DIR).resolve()
    named = name is not None
    name = name or plan.experiment_name(script)
    notes: list[str] = []
    if not named and (CONF_DIR / "experiment" / f"{name}.yaml").exists():
        notes.append(f"named {name}-imported: trainstack ships an experiment {name} (give --name to choose)")
        name = f"{name}-imported"
    target = where / "experiment" / f"{name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        errors.append(ConfigError("--name", f"'{name}' cannot name an experiment (it names the run id too)",
                                  "use letters, digits, '.', '_' and '-'", value=name))
    elif target.exists() and not force:
        errors.append(ConfigError(str(target), "exists already", "give --name NEW, or --force to replace it"))
    elif where != CONF_DIR.resolve() and (CONF_DIR / "experiment" / f"{name}.yaml").exists():
        errors.append(ConfigError("--name", f"trainstack ships an experiment named '{name}': "
                                  f"experiment={name} would be ambiguous", "give --name NEW", value=name))
    if errors:
        raise ConfigErrors(errors)
    made = plan.make(reading, parsed, name, plan.search_dirs(CONF_DIR, config_dir))
    made.notes[:0] = notes
    return Draft(script, reading, parsed, made, target, to_yaml(made, script))


def run_import(script: Path, config_dir: Path | None, *, name: str | None = None, env: dict[str, str] | None = None,
               slime_root: Path | None = None, force: bool = False, write: bool = True) -> Result:
    """Draft, render from a scratch copy, compare, then (only then) write DIR/experiment/<name>.yaml."""
    d = draft(script, config_dir, name=name, env=env, slime_root=slime_root, force=force)
    name = d.target.stem
    with tempfile.TemporaryDirectory(prefix="trainstack-import-") as scratch:
        (Path(scratch) / "experiment").mkdir()
        (Path(scratch) / "experiment" / f"{name}.yaml").write_text(d.text, encoding="utf-8")
        extra = [scratch] + ([str(config_dir.resolve())] if config_dir is not None and config_dir.is_dir() else [])
        try:
            run, cmd = proof.render(name, extra, d.reading.slime_root)
        except ConfigErrors as err:
            raise ConfigErrors([_relocated(e, scratch, d.target) for e in err.errors] + [ConfigError(
                str(script), "the imported experiment does not pass trainstack's checks (above): the script would "
                "fail as slime runs it, or uses what trainstack refuses", "fix the script (or a copy) and import it "
                "again")]) from None
    checked = proof.compare(d.parsed, d.reading.launch.entrypoint, run, cmd)
    proof.compare_env(d.plan.env, cmd, checked)
    result = Result(script, d.target, d.plan, checked, d.text, [*d.reading.notes, *d.parsed.notes, *d.plan.notes])
    if write:
        d.target.parent.mkdir(parents=True, exist_ok=True)
        tmp = d.target.with_name(f".{d.target.name}.tmp")
        tmp.write_text(d.text, encoding="utf-8")
        os.replace(tmp, d.target)
        result.written = True
    return result


def _relocated(err: ConfigError, scratch: str, target: Path) -> ConfigError:
    """An error of the scratch copy, named by the file it will be."""
    fix = lambda s: s.replace(f"{scratch}/experiment/{target.name}", str(target)).replace(scratch, str(target.parent.parent))  # noqa: E731
    return ConfigError(err.key, fix(err.problem), fix(err.fix), err.value, fix(err.source), err.related)


def to_yaml(made: plan.Plan, script: Path) -> str:
    import yaml

    from trainstack.upstream.argtable import load_table

    class Dumper(yaml.SafeDumper):
        pass

    def flow_lists(dumper: yaml.SafeDumper, data: list) -> Any:
        flow = all(not isinstance(x, (dict, list)) for x in data) or all(isinstance(x, list) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow and bool(data))

    Dumper.add_representer(list, flow_lists)
    body = dict(made.experiment)
    defaults = body.pop("defaults")
    head = ["# @package _global_",
            f"# Imported by `trainstack import` from {script.name} (slime {load_table().slime_commit[:8]}): the",
            "# presets below plus these deltas render the script's argv (`trainstack import` checked it).",
            "# What import decided on the way:"]
    head += [f"#   - {_one_line(n)}" for n in made.notes] or ["#   (nothing)"]
    text = "\n".join(head) + "\n"
    text += yaml.dump({"defaults": defaults}, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=10_000)
    text += yaml.dump(body, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=10_000)
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())
