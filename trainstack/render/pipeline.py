"""compose -> resolve -> validate -> render, as one call for the app, the CLI and tests."""
from __future__ import annotations

from typing import Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.render.command import SlimeCommand, render
from trainstack.config.resolve import CONF_DIR, PRIMARY_CONFIG, Origin, ResolvedRun, config_dirs, resolve
from trainstack.rules.validate import validate


def build(cfg: Any, origin: Origin) -> tuple[ResolvedRun, SlimeCommand]:
    """Resolve, validate and render a composed config; raises ConfigErrors with every problem."""
    run = resolve(cfg, origin)
    from trainstack.config.wandb_naming import name_wandb_run, sweep_name

    name_wandb_run(run, sweep_name(cfg))  # W&B: named by the run id, grouped by its sweep (docs/compare.md)
    errors = validate(run)
    if errors:
        raise ConfigErrors(errors)
    return run, render(run)


def compose(overrides: Sequence[str] = (), conf_dir: str | None = None) -> tuple[Any, Origin]:
    """Compose the real config tree with Hydra's compose API (same overrides as run.py)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from trainstack.config.overrides import normalise_argv

    from trainstack.config.hydra_entry import register_launchers

    conf = str(conf_dir or CONF_DIR)
    if conf_dir is not None:
        conf, overrides = config_dir_overrides(conf, overrides)
    normalised = normalise_argv(list(overrides), conf)
    register_launchers()
    try:
        with initialize_config_dir(config_dir=conf, version_base="1.3", job_name="trainstack"):
            cfg = hydra_compose(config_name=PRIMARY_CONFIG, overrides=normalised, return_hydra_config=True)
    except HydraException as ex:
        raise ConfigErrors([ConfigError("overrides", str(ex).splitlines()[0], "check the override syntax "
                                        "(key=value, group=option, +key=value)", value=" ".join(overrides))]) from None
    choices: dict[str, Any] = OmegaConf.to_container(cfg.hydra.runtime.choices)  # type: ignore[assignment]
    task: list = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)  # type: ignore[assignment]
    origin = Origin(choices={k: v for k, v in choices.items() if not str(k).startswith("hydra")},
                    overrides=[str(o) for o in task])
    origin.conf_dir = CONF_DIR if conf_dir is None else type(CONF_DIR)(conf)
    origin.search_dirs = config_dirs(cfg.hydra)  # a --config-dir's presets are attributed to their files
    with_hydra_removed = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
    return with_hydra_removed, origin


def config_dir_overrides(conf_dir: str, overrides: Sequence[str]) -> tuple[str, list[str]]:
    """`--config-dir DIR` of the `trainstack` commands: a whole tree (DIR/config.yaml) replaces the shipped
    one; a directory of presets only (`experiment/mine.yaml`, as `trainstack import` writes) is added to
    the shipped tree, as run.py's (Hydra's) --config-dir does."""
    from pathlib import Path

    path = Path(conf_dir).expanduser().resolve()
    if not path.is_dir():
        raise ConfigErrors([ConfigError("--config-dir", f"{conf_dir} is not a directory", "give the directory that "
                                        "holds your presets (experiment/, model/, ...)", value=conf_dir)])
    if (path / f"{PRIMARY_CONFIG}.yaml").is_file():
        return str(path), list(overrides)
    return str(CONF_DIR), [f"hydra.searchpath=[file://{path}]", *overrides]


def build_from_overrides(overrides: Sequence[str] = (), conf_dir: str | None = None) -> tuple[ResolvedRun, SlimeCommand]:
    cfg, origin = compose(overrides, conf_dir)
    return build(cfg, origin)
