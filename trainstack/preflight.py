"""Checks that need the launch host, run before anything is written, by the dry run and the launch alike.

The tiny backend's trainer refuses its argv for reasons the validator cannot see from the config
alone (missing data files, features it does not implement). Running the trainer's own parse and
checks here means a run that would fail does so before a run dir, a lease or a process exists,
and a dry run answers exactly like the launch (same errors, exit code 2).
"""
from __future__ import annotations

import importlib

from trainstack.errors import ConfigErrors
from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun

# Data flags an env's `meta.prepare` hook may create at launch (the dry run does not run hooks).
PREPARED_DATA_FLAGS = ("--prompt-data", "--eval-prompt-data", "--hf-checkpoint")


def prepare_data(hook: str | None, data_root: str) -> None:
    """Call an env's `meta.prepare(data_root)` hook (e.g. write the arithmetic prompt files); idempotent."""
    if not hook:
        return
    module, _, fn = hook.rpartition(".")
    getattr(importlib.import_module(module), fn)(data_root)


def prepare_env_data(run: ResolvedRun) -> None:
    prepare_data(run.meta.get("env", {}).get("prepare"), run.paths.data_root)


def preflight(run: ResolvedRun, cmd: SlimeCommand, *, launching: bool) -> None:
    """Raise ConfigErrors for what would make the trainer refuse this run. A dry run trusts the env's
    data hook to create the files it names; a launch runs the hook only once everything else passed
    (so a refused launch writes nothing), then checks the data too."""
    if run.cluster.backend != "tiny":
        return
    has_hook = bool(run.meta.get("env", {}).get("prepare"))
    _check_tiny(run, cmd, trust_hook=has_hook)
    if launching and has_hook:
        prepare_env_data(run)
        _check_tiny(run, cmd, trust_hook=False)


def _check_tiny(run: ResolvedRun, cmd: SlimeCommand, *, trust_hook: bool) -> None:
    from trainstack.tiny.cli import parse_argv
    from trainstack.tiny.validate import validate

    try:
        validate(parse_argv(cmd.argv), env=cmd.env)
    except ConfigErrors as err:
        errors = err.errors
        if trust_hook:
            errors = [e for e in errors if not (e.key in PREPARED_DATA_FLAGS and "does not exist" in e.problem)]
        if run.source("custom_config_path").startswith("trainstack"):  # written at launch (env.meta.http_env)
            errors = [e for e in errors if e.key != "--custom-config-path"]
        if errors:
            raise ConfigErrors([_as_config_key(run, e) for e in errors]) from None


def _as_config_key(run: ResolvedRun, error):
    """The trainer names flags (`--rm-type`); the user wrote a config key (`env.rm_type`)."""
    from dataclasses import replace

    from trainstack.argtable import load_table

    dest = load_table().flag_to_dest.get(error.key)
    if dest is None:
        return error
    return replace(error, key=run.key(dest), source=run.source(dest),
                   problem=f"{error.problem} ({error.key})" if error.key not in error.problem else error.problem)
