"""The launchers trainstack knows: name -> the class implementing it (imported only when used).

`cluster.launcher` accepts exactly these names (the schema's choices come from here).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainstack.errors import ConfigError, ConfigErrors

if TYPE_CHECKING:
    from trainstack.launch.base import Launcher

LAUNCHERS: dict[str, str] = {
    "local": "trainstack.launch.local:LocalLauncher",
    "ray_job": "trainstack.launch.ray_job:RayJobLauncher",
    "slurm": "trainstack.launch.slurm:SlurmLauncher",
    "lium": "trainstack.launch.lium:LiumLauncher",
}


def names() -> tuple[str, ...]:
    return tuple(LAUNCHERS)


def get(name: str) -> "Launcher":
    target = LAUNCHERS.get(name)
    if target is None:
        raise ConfigErrors([ConfigError("cluster.launcher", f"'{name}' is not a launcher of this trainstack",
                                        f"use one of: {', '.join(LAUNCHERS)}", value=name)])
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()


def sweep_launcher_problem(launcher_name: str, hydra_launcher_target: str) -> ConfigError | None:
    """`-m` with a cluster whose launcher needs its own Hydra launcher (SLURM) under another one."""
    target = LAUNCHERS.get(launcher_name)
    if target is None:
        return None
    module, _, cls = target.partition(":")
    needed = getattr(getattr(importlib.import_module(module), cls), "sweep_launcher", None)
    if needed is None or f"trainstack_{needed}" in hydra_launcher_target or f".{needed}" in hydra_launcher_target:
        return None
    return ConfigError("cluster.launcher", f"a sweep of '{launcher_name}' runs must be submitted by the "
                       f"'{needed}' Hydra launcher, not {hydra_launcher_target.rsplit('.', 1)[-1] or 'the default'} "
                       "(which would run or submit each point without a sweep manifest)",
                       f"add hydra/launcher={needed} to the command line", value=launcher_name)
