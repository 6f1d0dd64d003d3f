"""Finding the features: the `trainstack.features` entry-point group.

Each entry point names a `register(registry)` function (pyproject.toml lists trainstack's own:
upstream rules, Hub sync, HTTP envs, the tiny trainer); a third party's package adds its own
the same way and trainstack finds it once that package is installed. Discovery reads the
installed metadata once per process (`hooks.registry()` calls `discover` once), and feature modules
import nothing heavy at import time, so a dry run pays a few milliseconds for it.

A checkout whose installed metadata predates a feature (an editable install made before
pyproject.toml gained the group) would silently lose that feature's checks and hooks; then the
group is read from the checkout's own pyproject.toml instead.

The launchers' group (`trainstack.launchers`, trainstack/registry.py) is read the same way:
each entry_points.txt is parsed once per process, for every group at once.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

GROUP = "trainstack.features"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared(group: str = GROUP) -> dict[str, str]:
    """name -> "module:function" for every installed feature (trainstack's own included), or the
    entries of another of trainstack's groups."""
    found, ours = _scan(sys.path, group)
    if not ours:  # not installed, or installed from an older pyproject: the checkout says
        for name, value in _from_pyproject(group).items():
            found.setdefault(name, value)
    return found


def _scan(paths: list[str], group: str = GROUP) -> tuple[dict[str, str], bool]:
    """The group's entries in the distributions on `paths`, the first distribution of each name
    winning as importlib.metadata has it, and whether trainstack's own declares any."""
    found, ours = _scan_all(tuple(paths))
    return dict(found.get(group, {})), group in ours


@lru_cache(maxsize=4)
def _scan_all(paths: tuple[str, ...]) -> tuple[dict[str, dict[str, str]], frozenset[str]]:
    """Every group's entries on `paths` and the groups trainstack's own distribution declares, in
    one pass (the launchers' group and the features' group are both read by a dry run). Read
    directly (entry_points.txt in each *.dist-info / *.egg-info): importing importlib.metadata and
    scanning with it costs a CLI call ~0.1 s."""
    found: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    ours: set[str] = set()
    for entry in paths:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:  # not a directory (a zip, an import hook's token)
            continue
        for meta in names:
            if not meta.endswith((".dist-info", ".egg-info")):
                continue
            dist = re.sub(r"[-_.]+", "-", meta.rsplit(".", 1)[0].split("-")[0]).lower()
            if dist in seen:
                continue
            seen.add(dist)
            for group, entries in _groups(os.path.join(entry or ".", meta, "entry_points.txt")).items():
                if dist == "trainstack" and entries:
                    ours.add(group)
                into = found.setdefault(group, {})
                for name, value in entries.items():
                    into.setdefault(name, value)
    return found, frozenset(ours)


@lru_cache(maxsize=None)
def _groups(path: str) -> dict[str, dict[str, str]]:
    """Every group of an entry_points.txt (an INI file: `[group]`, then `name = value` lines), read
    once per process."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out: dict[str, dict[str, str]] = {}
    inside: dict[str, str] | None = None
    for line in lines:
        line = line.strip()
        if line.startswith("["):
            inside = out.setdefault(line.strip("[]").strip(), {})
        elif inside is not None and "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            inside[name.strip()] = value.strip()
    return out


def _from_pyproject(group: str = GROUP) -> dict[str, str]:
    if not PYPROJECT.is_file() or sys.version_info < (3, 11):
        return {}
    import tomllib

    with open(PYPROJECT, "rb") as f:
        data = tomllib.load(f)
    return dict(data.get("project", {}).get("entry-points", {}).get(group, {}))


def resolve(value: str) -> Callable[[Any], None]:
    module, _, attr = value.split("[", 1)[0].partition(":")  # `module:attr [extras]`, as importlib.metadata reads it
    obj = importlib.import_module(module.strip())
    for part in (attr.strip() or "register").split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def discover() -> list[tuple[str, Callable[[Any], None]]]:
    """(name, register function) of every feature, in name order (hooks.Registry orders the hooks).
    A feature that cannot be loaded stops everything with its name: skipping it would silently drop
    its checks and hooks."""
    out = []
    for name, value in sorted(declared().items()):
        try:
            out.append((name, resolve(value)))
        except Exception as ex:  # noqa: BLE001 - any failure to load it is reported the same way
            from trainstack.errors import ConfigError, ConfigErrors

            raise ConfigErrors([ConfigError(
                GROUP, f"the feature {name!r} ({value}) cannot be loaded: {type(ex).__name__}: {ex}",
                "fix or uninstall the package that declares it (its entry point in this group)",
                value=name)]) from None
    return out
