"""The launchers trainstack knows: the `trainstack.launchers` entry-point group.

Every launcher, trainstack's own included (pyproject.toml), is one entry point `name =
module:Class`; another package adds one by declaring an entry point in that group, nothing in
trainstack changes. The group is read once (cached; trainstack/features.py reads the installed
metadata without importlib.metadata, which cost a dry run ~10 ms); a launcher's module is imported
only when that launcher is used. `cluster.launcher` accepts exactly these names.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors

GROUP = "trainstack.launchers"


@lru_cache(maxsize=1)
def _entry_points() -> dict[str, str]:
    """name -> "module:Class"; the first distribution on sys.path wins (an editable checkout over a stale install)."""
    from trainstack.features import declared

    return declared(GROUP)


def names() -> tuple[str, ...]:
    return tuple(sorted(_entry_points()))


def unknown(name: str, key: str = "cluster.launcher") -> ConfigError:
    return ConfigError(key, f"'{name}' is not a launcher of this trainstack",
                       f"use one of: {', '.join(names())} (launchers are the '{GROUP}' entry points)", value=name)


@lru_cache(maxsize=None)
def launcher_class(name: str) -> Any:
    """The launcher class (a trainstack.launch.base.Launcher) named `name`: its module imported on first use.
    Typed loosely on purpose: the registry sits below the launchers it names."""
    value = _entry_points().get(name)
    if value is None:
        raise ConfigErrors([unknown(name)])
    try:
        from trainstack.features import resolve

        cls = resolve(value)
    except Exception as ex:  # a broken third-party launcher: say which, never a traceback
        raise ConfigErrors([ConfigError("cluster.launcher", f"the launcher '{name}' ({value}) cannot be "
                                        f"imported: {type(ex).__name__}: {ex}", "fix or reinstall the package "
                                        "that provides it", value=name)]) from None
    return cls


def get(name: str) -> Any:
    return launcher_class(name)()
