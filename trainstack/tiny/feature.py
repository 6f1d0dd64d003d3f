"""The tiny CPU trainer joins the core here: its own parse and checks of the rendered command run
in every preflight (dry run and launch alike), so a run the trainer would refuse is refused before
anything is written. The checks are imported when a tiny run is preflighted, not before."""
from __future__ import annotations

from typing import Any, Callable

from trainstack import hooks

# Data flags an env's `meta.prepare` hook may create at launch (the dry run does not run hooks).
PREPARED_DATA_FLAGS = ("--prompt-data", "--eval-prompt-data", "--hf-checkpoint")


def preflight(run: Any, cmd: Any, made_by_data_hook: Callable[[str], bool]) -> list:
    """The tiny trainer's parse and checks of the argv it will get; data files the env's data hook
    writes at launch, and a settings file trainstack writes at launch, are trusted to appear."""
    if run.cluster.backend != "tiny":
        return []
    from trainstack.errors import ConfigError, ConfigErrors

    if getattr(run, "entrypoint", "train.py") == "train_async.py":  # the tiny loop is train.py's, never async
        return [ConfigError("slime.entrypoint", "the tiny backend runs slime's synchronous loop (train.py) only; "
                            "train_async.py (rollout of step i+1 overlapping training of step i) is not implemented",
                            "drop slime.entrypoint (or set slime.entrypoint=train.py) for a tiny run",
                            value="train_async.py")]
    from trainstack.tiny.cli import parse_argv
    from trainstack.tiny.validate import validate

    try:
        validate(parse_argv(cmd.argv), env=cmd.env)
    except ConfigErrors as err:
        errors = [e for e in err.errors if not (e.key in PREPARED_DATA_FLAGS and "does not exist" in e.problem
                                                and isinstance(e.value, str) and made_by_data_hook(e.value))]
        if run.source("custom_config_path").startswith("trainstack"):  # written at launch (env.meta.http_env)
            errors = [e for e in errors if e.key != "--custom-config-path"]
        return errors
    return []


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.PREFLIGHT, preflight)
