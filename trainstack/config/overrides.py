"""Check and normalise command-line overrides before Hydra sees them.

Hydra rejects `args.rollout_batch_size=64` unless the key already exists (struct mode) and
its message names neither slime nor a fix; slime itself would silently ignore a misspelled
flag. So every override key is checked here against slime's table and trainstack's schema:
valid dests are rewritten to `++ns.dest=value` (add or override), anything unknown is an error
with a did-you-mean, and nothing runs.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

from trainstack.config.schema import DEST_NAMESPACES, GROUPS, ROOT_KEYS, ROOT_SECTIONS
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.secrets import env_fix, is_secret_name, redact_override, secret_in_value
from trainstack.upstream import argtable as at
from trainstack.upstream.renames import hint_for_dest
from trainstack.upstream.select import activate_for_root, root_from_overrides

_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][\w.\-/@]*?)(?P<eq>=(?P<value>.*))?$", re.S)
_FREE_MAPS = {"runtime_env.env_vars"}  # user-named keys
_STRING_SCALARS = ("run_id", "name")  # names: `run_id=123` is the string "123"
_NUMBER = re.compile(r"^[+-]?(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@lru_cache(maxsize=None)
def group_options(conf_dir: str, group: str) -> tuple[str, ...]:
    """Options of a group; `conf_dir` may list several dirs (os.pathsep), e.g. with --config-dir."""
    found = {p.stem for d in conf_dir.split(os.pathsep) if (Path(d) / group).is_dir()
             for p in (Path(d) / group).glob("*.yaml")}
    return tuple(sorted(found))


def _simple_values(value: str) -> list[str] | None:
    """Values of a plain `a,b,c` sweep; None for sweep functions like glob(...)/choice(...)."""
    if "(" in value or "[" in value or "$" in value:
        return None
    return [v.strip() for v in value.split(",")]


def check_override(token: str, conf_dir: str, has_searchpath: bool) -> tuple[str, ConfigError | None]:
    if "=" in token and not token.split("=", 1)[0].lstrip("+~").strip():  # `=5`: Hydra would crash on it
        return token, ConfigError("overrides", f"`{token}` has no key before '='", "write key=value, e.g. algo.lr=1e-6",
                                  source="command line")
    m = _OVERRIDE.match(token)
    if not m:
        return token, None  # let Hydra's own parser explain
    prefix, key, value = m.group("prefix") or "", m.group("key"), m.group("value")
    head, _, rest = key.partition(".")
    if key.startswith("hydra.launcher.") and prefix == "" and value is not None:
        return f"++{key}={value}", None  # the launcher's settings (checked by the sweep plugin, not Hydra's schema)
    if key.startswith("hydra") or "@" in key or "/" in key:
        return token, None
    if key == "resume" and value is not None and prefix == "":  # shorthand: resume=never
        return f"resume.mode={value}", None
    if key in _STRING_SCALARS and value is not None and _NUMBER.match(value):  # run_id=123: a name, not a number
        return f"{prefix}{key}='{value}'", None
    if head in GROUPS and not rest:  # group choice: model=qwen3-4B
        options = group_options(conf_dir, head)
        vals = _simple_values(value or "")
        if value in ("null", "") and prefix != "~" and head != "experiment":
            article = "an" if head[0] in "aeiou" else "a"
            return token, ConfigError(head, f"every run needs {article} {head} preset; {head}={value or 'nothing'} removes it",
                                      f"choose one: {', '.join(options)}", value=value, source=f"command line `{token}`")
        if prefix == "~" or vals is None or has_searchpath or value in ("null", ""):
            return token, None
        for v in vals:
            if v not in options:
                close = difflib.get_close_matches(v, options, n=3, cutoff=0.5)
                fix = (f"did you mean {head}={close[0]}?" if close else "") + f" available: {', '.join(options)}"
                return token, ConfigError(head, f"no {head} preset named '{v}'", fix.strip(), value=v,
                                          source=f"command line `{token}`")
        return token, None
    if head not in ROOT_KEYS:
        table = at.load_table()
        cand = table.suggest(key)
        if cand:
            fix = f"slime arguments go under args.: did you mean 'args.{cand[0]}=...'?"
        else:
            close = difflib.get_close_matches(head, sorted(ROOT_KEYS - {'hydra'}), n=3, cutoff=0.6)
            fix = at.did_you_mean(close) or "top-level keys: " + ", ".join(sorted(ROOT_KEYS - {"hydra"}))
        return token, ConfigError(key, "unknown config key", fix, source=f"command line `{key}=...`")
    if head in DEST_NAMESPACES:
        if not rest:
            return token, None
        dest = rest.split(".", 1)[0]
        if dest == "meta":
            return token, None
        table = at.load_table()
        alias = table.aliases.get(dest) if "." not in rest else None
        if alias and value is not None:  # `args.sglang_cuda_graph_bs=[..]`: the option slime's scripts use
            return f"{'~' if prefix == '~' else '++'}{head}.{alias}={value}", None
        if dest not in table or "." in rest:
            cand = table.suggest(dest)
            fix = (hint_for_dest(dest, table, f"{head}.") or at.did_you_mean(cand, f"{head}.")
                   or f"this is not one of slime's {len(table.specs)} arguments; see docs/config.md")
            # the value of an unknown key is never echoed (a mistyped args.wandb_kye=... holds a key)
            return token, ConfigError(key, "not a slime argument (slime would silently ignore it)", fix,
                                      source=f"command line `{key}=...`")
        if prefix in ("", "+"):
            return f"++{key}={value}" if value is not None else token, None
        return token, None
    if head in ROOT_SECTIONS and rest:
        field_name, _, sub = rest.partition(".")
        section = ROOT_SECTIONS[head]
        blocks = tuple(section.extra_keys()) if hasattr(section, "extra_keys") else ()  # cluster.<launcher>
        names = [f.name for f in dataclasses.fields(section)] + list(blocks)
        if field_name not in names:
            close = difflib.get_close_matches(field_name, names, n=3, cutoff=0.6)
            moved = section.moved_key(rest) if hasattr(section, "moved_key") else None
            fix = f"use {moved}" if moved else at.did_you_mean(close, f"{head}.") or f"{head} has: {', '.join(names)}"
            problem = "moved to the settings of the launcher that uses it" if moved else f"unknown {head} setting"
            return token, ConfigError(key, problem, fix, source=f"command line `{key}=...`")
        if prefix in ("", "+") and value is not None and (not sub or f"{head}.{field_name}" in _FREE_MAPS
                                                           or field_name in blocks):
            return f"++{key}={value}", None  # a schema field a preset file may not spell out
    return token, None


def split_hydra_argv(argv: list[str]) -> tuple[list[str], Any]:
    """Hydra's own command line parser decides which tokens are overrides (`--cfg job`, `-c job`,
    `--info defaults`, `-sc install=bash`, `--config-dir D` are not)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def refuse(message: str) -> NoReturn:  # argparse would print the value as typed (a secret after a flag)
        raise ConfigErrors([ConfigError("command line", message, "python run.py --help lists the flags; overrides "
                                        "are key=value")])

    parser.error = refuse  # type: ignore[method-assign]
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        refuse(f"unrecognized arguments: {' '.join(unknown)}")
    return list(ns.overrides or []), ns


def normalise_argv(argv: list[str], conf_dir: str) -> list[str]:
    """Return argv with dest overrides rewritten; raise ConfigErrors for unknown keys."""
    overrides, flags = split_hydra_argv(argv)
    if flags.shell_completion or flags.help or flags.hydra_help:
        return list(argv)  # completion/help read the overrides themselves (`-sc install=bash`)
    errors = []
    activate_for_root(root_from_overrides(overrides))  # the run's slime decides which keys are slime's
    has_searchpath = any(a.startswith(("hydra.searchpath", "+hydra.searchpath")) for a in overrides)
    rewritten = []
    dirs = os.pathsep.join(filter(None, [conf_dir, flags.config_dir]))  # --config-dir adds presets
    for tok in overrides:
        if redact_override(tok) != tok:  # refused before Hydra writes it anywhere (multirun.yaml, overrides.yaml)
            key, _, value = tok.partition("=")
            key = key.lstrip("+~")
            leaf = next((m for m in re.findall(r"[A-Za-z_][\w]*", value) if is_secret_name(m)), key)
            why = secret_in_value(value)
            fix = env_fix(key if is_secret_name(key.rsplit(".", 1)[-1]) else leaf)
            if "URL" in why:
                fix = f"drop user:password@ from {key}; " + fix
            errors.append(ConfigError(key, f"holds a secret{f' ({why})' if why else ''}; secrets must not be put "
                                      "in configs or on the command line (they end up in saved configs, logs and "
                                      "sweep manifests)", fix, source=f"command line `{redact_override(tok)}`"))
            rewritten.append(tok)
            continue
        new, err = check_override(tok, dirs, has_searchpath)
        rewritten.append(new)
        if err:
            errors.append(err)
    from trainstack.config import hydra_dirs

    for key, path in hydra_dirs.given(overrides).items():  # Hydra creates them before anything else runs
        if (err := hydra_dirs.problem(key, path)) is not None:
            errors.append(err)
    if not errors:
        errors = syntax_errors(rewritten)
    if not errors:
        errors = yaml_errors(dirs, rewritten)
    if errors:
        raise ConfigErrors(errors)
    out, pending = [], list(zip(overrides, rewritten))
    for tok in argv:  # put each rewritten override where the user wrote it
        if pending and tok == pending[0][0]:
            out.append(pending.pop(0)[1])
        else:
            out.append(tok)
    return out


def syntax_errors(overrides: list[str]) -> list[ConfigError]:
    """Hydra's own override grammar, reported our way (one message, exit 2)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    errors = []
    for tok in overrides:
        try:
            parser.parse_override(tok)
        except HydraException as ex:
            errors.append(ConfigError(tok.split("=", 1)[0].lstrip("+~"), "cannot parse this override: " + str(ex).splitlines()[0],
                                      "write key=value (quote values with spaces or brackets in your shell)",
                                      value=tok, source="command line"))
    return errors


def _selected_files(conf_dirs: list[Path], overrides: list[str]) -> list[Path]:
    """config.yaml, the group options this command selects (or the defaults), and experiments' overrides,
    in each config dir (the packaged conf/ first, then a --config-dir)."""
    import yaml

    from trainstack.config.resolve import PRIMARY_CONFIG

    primary_file = conf_dirs[0] / f"{PRIMARY_CONFIG}.yaml"
    chosen: dict[str, list[str]] = {}
    try:
        primary = yaml.load(primary_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except (OSError, yaml.YAMLError):
        return [primary_file]
    for entry in primary.get("defaults", []) if isinstance(primary, dict) else []:
        if isinstance(entry, dict):
            for k, v in entry.items():
                k = k.replace("optional ", "")
                if k in GROUPS and isinstance(v, str):
                    chosen[k] = [v]
    for tok in overrides:
        m = _OVERRIDE.match(tok)
        if m and m.group("key") in GROUPS and m.group("value"):
            vals = _simple_values(m.group("value"))
            if vals is not None:
                chosen[m.group("key")] = vals
    files = [primary_file]
    for conf_dir in conf_dirs:
        files += [conf_dir / group / f"{o}.yaml" for group, opts in chosen.items() for o in opts if o != "null"]
    return [f for f in dict.fromkeys(files) if f.is_file()]


def yaml_errors(conf_dirs: str, overrides: list[str]) -> list[ConfigError]:
    """A broken YAML file is one message naming the file and line, not a parser traceback; so is a key
    written twice in one mapping and an anchor that contains itself (`conf_dirs`: os.pathsep-joined,
    the packaged conf/ and a --config-dir)."""
    from trainstack.config.hydra_errors import not_text_error, structure_errors

    errors = []
    for path in _selected_files([Path(d) for d in conf_dirs.split(os.pathsep)], overrides):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            errors.append(not_text_error(path))
            continue
        except OSError:
            continue
        errors += structure_errors(path, text)
    return errors
